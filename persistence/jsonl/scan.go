package jsonl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// Scan reads one session log from r, plain JSONL or zstd (told apart by
// the zstd magic number), and calls fn for every event in seq order, with
// packed chunk rows expanded to one assistant/chunk event per member. It
// returns the header of the log.
//
// Recovery follows dsh: in a plain log a final line without its newline,
// or a final line that is not valid JSON, is a torn write and is dropped;
// in a zstd log a torn or corrupt final frame is dropped. Anything wrong
// before that is an error naming the line (or frame). An event whose seq
// does not continue the log is an error wrapping persistence.ErrSeqGap.
// (ReadFile and Store.Load instead keep a log whose seq jumps forward and
// report the jumps in Log.Gaps, so that no stored event is lost.)
// Unknown event types are passed on as they are; unknown envelope keys are
// ignored. The Data of each event is a fresh slice the caller may keep.
//
// If fn returns an error, Scan stops and returns it unchanged. On any
// error, fn has seen only events of the log's valid prefix.
func Scan(r io.Reader, fn func(persistence.Event) error) (session.Header, error) {
	res, err := scan(r, fn, scanOpts{})
	return res.header, err
}

// ReadFile loads the session log at path: its header and every event.
// A path ending in ".zstd" must hold zstd frames; otherwise the format is
// detected from the content. See Scan for the recovery rules. The file is
// read whole, and the events' Data share its memory.
func ReadFile(path string) (*persistence.Log, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	log := &persistence.Log{}
	if !bytes.HasPrefix(data, zstdMagic) {
		// One event per line, less the header; packed rows add more.
		log.Events = make([]persistence.Event, 0, max(bytes.Count(data, []byte{'\n'})-1, 0))
	}
	res, err := scanBytes(data, func(e persistence.Event) error {
		log.Events = append(log.Events, e)
		return nil
	}, scanOpts{zstd: strings.HasSuffix(path, ".zstd"), lenient: true})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	log.Header = res.header
	log.Gaps = res.gaps
	return log, nil
}

// scanResult describes a scanned log.
type scanResult struct {
	header session.Header
	// events is the number of events accepted, and so the seq the next
	// appended event must carry.
	events int64
	// committed is the length of the valid prefix of the file: the header
	// and every accepted line or frame. A torn tail lies beyond it.
	committed int64
	// gaps are the forward jumps of seq a lenient scan accepted.
	gaps []persistence.SeqGap
}

// zstdMagic starts every zstd frame (0xFD2FB528, little endian).
var zstdMagic = []byte{0x28, 0xB5, 0x2F, 0xFD}

// scanOpts tunes scan.
type scanOpts struct {
	// zstd refuses content that is not zstd.
	zstd bool
	// headerOnly stops after the header.
	headerOnly bool
	// lenient loads a log whose seq jumps forward, reporting the jumps in
	// scanResult.gaps, instead of failing with persistence.ErrSeqGap.
	lenient bool
}

func scan(r io.Reader, fn func(persistence.Event) error, opts scanOpts) (scanResult, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(len(zstdMagic))
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return scanResult{}, err
	}
	isZstd := bytes.Equal(magic, zstdMagic)
	if opts.zstd && !isZstd {
		return scanResult{}, errors.New("jsonl: not a zstd log (bad magic number)")
	}
	d := &recordDecoder{fn: fn, headerOnly: opts.headerOnly, lenient: opts.lenient}
	var res scanResult
	if isZstd {
		res, err = d.scanZstd(br)
	} else {
		res, err = d.scanPlain(&lineReader{r: br})
	}
	res.gaps = d.seqGaps
	return res, err
}

// scanBytes is scan over a log held in memory: plain lines are not copied,
// so the events' Data share data.
func scanBytes(data []byte, fn func(persistence.Event) error, opts scanOpts) (scanResult, error) {
	isZstd := bytes.HasPrefix(data, zstdMagic)
	if opts.zstd && !isZstd {
		return scanResult{}, errors.New("jsonl: not a zstd log (bad magic number)")
	}
	d := &recordDecoder{fn: fn, headerOnly: opts.headerOnly, lenient: opts.lenient}
	var res scanResult
	var err error
	if isZstd {
		res, err = d.scanZstd(bufio.NewReader(bytes.NewReader(data)))
	} else {
		d.stable = true
		res, err = d.scanPlain(&sliceLines{data: data})
	}
	res.gaps = d.seqGaps
	return res, err
}

// lineSource yields the lines of a plain log.
type lineSource interface {
	// next returns the next line without its newline; complete is false
	// for a final line without one. At the end it returns a nil line.
	next() (line []byte, complete bool, err error)
}

// scanPlain reads newline-delimited JSON.
func (d *recordDecoder) scanPlain(lr lineSource) (scanResult, error) {
	line, complete, err := lr.next()
	if err != nil {
		return scanResult{}, err
	}
	if line == nil {
		return scanResult{}, errors.New("jsonl: empty log: no session header")
	}
	if !complete {
		return scanResult{}, errors.New("jsonl: line 1: torn session header (no newline)")
	}
	var res scanResult
	if res.header, err = session.Parse(line); err != nil {
		return scanResult{}, fmt.Errorf("jsonl: line 1: %w", err)
	}
	d.line = 1
	res.committed = int64(len(line)) + 1
	if d.headerOnly {
		return res, nil
	}
	// A line that is not JSON is fatal only if anything follows it; as the
	// final line it is a torn write.
	var deferred error
	for {
		line, complete, err := lr.next()
		if err != nil {
			return scanResult{}, err
		}
		if line == nil {
			break
		}
		if deferred != nil {
			return scanResult{}, deferred
		}
		if !complete {
			break // a torn final line
		}
		d.line++
		if err := d.record(line, false); err != nil {
			var syn *syntaxError
			if !errors.As(err, &syn) {
				return scanResult{}, err
			}
			deferred = err
			continue
		}
		res.committed += int64(len(line)) + 1
	}
	res.events = d.next
	return res, nil
}

// scanZstd reads a sequence of zstd frames: the header frame, then one
// frame per append batch.
func (d *recordDecoder) scanZstd(br *bufio.Reader) (scanResult, error) {
	dec, err := zstdDecoder()
	if err != nil {
		return scanResult{}, err
	}
	fr := frameReader{r: br}
	frame, err := fr.next()
	switch {
	case err == io.EOF:
		return scanResult{}, errors.New("jsonl: empty log: no session header")
	case err != nil:
		return scanResult{}, fmt.Errorf("jsonl: zstd frame 1 (header): %w", err)
	}
	content, err := dec.DecodeAll(frame, nil)
	if err != nil {
		return scanResult{}, fmt.Errorf("jsonl: zstd frame 1 (header): %w", err)
	}
	// Each frame decodes into fresh memory that its events keep.
	d.stable = true
	if len(content) == 0 || content[len(content)-1] != '\n' || bytes.IndexByte(content, '\n') != len(content)-1 {
		return scanResult{}, errors.New("jsonl: zstd frame 1 must hold exactly the header line")
	}
	var res scanResult
	if res.header, err = session.Parse(content[:len(content)-1]); err != nil {
		return scanResult{}, fmt.Errorf("jsonl: line 1: %w", err)
	}
	d.line = 1
	res.committed = fr.offset
	if d.headerOnly {
		return res, nil
	}
	for n := 2; ; n++ {
		start := fr.offset
		frame, err := fr.next()
		if err == io.EOF || errors.Is(err, errTornFrame) {
			break // clean end, or a torn final frame
		}
		if err != nil {
			return scanResult{}, fmt.Errorf("jsonl: zstd frame %d at byte %d: %w", n, start, err)
		}
		if frame == nil { // skippable frame
			res.committed = fr.offset
			continue
		}
		content, err = dec.DecodeAll(frame, nil)
		if err == nil {
			err = checkFrameLines(content)
		}
		if err != nil {
			if fr.atEOF() {
				break // corrupt final frame: dropped like a torn one
			}
			return scanResult{}, fmt.Errorf("jsonl: zstd frame %d at byte %d (after line %d): %w", n, start, d.line, err)
		}
		for len(content) > 0 {
			i := bytes.IndexByte(content, '\n')
			d.line++
			if err := d.record(content[:i], true); err != nil {
				return scanResult{}, err
			}
			content = content[i+1:]
		}
		res.committed = fr.offset
	}
	res.events = d.next
	return res, nil
}

// checkFrameLines reports whether a batch frame holds only complete lines
// of valid JSON, so that a bad final frame is dropped as a whole.
func checkFrameLines(content []byte) error {
	if len(content) == 0 || content[len(content)-1] != '\n' {
		return errors.New("batch does not end with a newline")
	}
	for len(content) > 0 {
		i := bytes.IndexByte(content, '\n')
		if !json.Valid(content[:i]) {
			return errors.New("batch holds a line that is not valid JSON")
		}
		content = content[i+1:]
	}
	return nil
}

// sliceLines yields the lines of a log held in memory.
type sliceLines struct {
	data []byte
}

func (sl *sliceLines) next() ([]byte, bool, error) {
	if len(sl.data) == 0 {
		return nil, false, nil
	}
	i := bytes.IndexByte(sl.data, '\n')
	if i < 0 {
		line := sl.data
		sl.data = nil
		return line, false, nil
	}
	line := sl.data[:i]
	sl.data = sl.data[i+1:]
	return line, true, nil
}

// lineReader returns lines of any length from a bufio.Reader.
type lineReader struct {
	r   *bufio.Reader
	buf []byte
}

// next returns the next line without its newline; complete is false for
// a final line without one. At end of file it returns a nil line. The line
// is valid until the next call.
func (lr *lineReader) next() (line []byte, complete bool, err error) {
	lr.buf = lr.buf[:0]
	for {
		frag, err := lr.r.ReadSlice('\n')
		switch err {
		case nil:
			if len(lr.buf) == 0 {
				return frag[:len(frag)-1], true, nil
			}
			lr.buf = append(lr.buf, frag[:len(frag)-1]...)
			return lr.buf, true, nil
		case bufio.ErrBufferFull:
			lr.buf = append(lr.buf, frag...)
		case io.EOF:
			lr.buf = append(lr.buf, frag...)
			if len(lr.buf) == 0 {
				return nil, false, nil
			}
			return lr.buf, false, nil
		default:
			return nil, false, err
		}
	}
}
