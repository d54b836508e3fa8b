package jsonl

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// maxFrameDecoded bounds the decoded size of one frame, so a hostile file
// cannot make a reader allocate without limit.
const maxFrameDecoded = 1 << 30

// zstdDecoder is shared by all readers; DecodeAll is safe for concurrent
// use and the decoder holds no per-log state.
var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxFrameDecoded))
})

// errTornFrame reports a frame cut short by the end of the file.
var errTornFrame = errors.New("zstd frame is cut short (torn write)")

const (
	skippableMagicMask = 0xFFFFFFF0
	skippableMagic     = 0x184D2A50
	zstdFrameMagic     = 0xFD2FB528
	// maxBlockSize is the zstd Block_Maximum_Size.
	maxBlockSize = 128 << 10
)

// frameReader splits a byte stream into zstd frames without decoding
// them, by walking the frame header and block headers. It lets a reader
// tell a torn final frame from corruption in the middle of a log.
type frameReader struct {
	r      *bufio.Reader
	offset int64 // bytes consumed so far
	buf    []byte
}

// next returns the bytes of the next frame, nil for a skippable frame
// (already skipped), io.EOF at a clean end, an error wrapping errTornFrame
// when the stream ends inside a frame, or another error for bytes that
// are not a zstd frame. The frame is valid until the next call.
func (fr *frameReader) next() ([]byte, error) {
	fr.buf = fr.buf[:0]
	if err := fr.read(4); err != nil {
		if err == io.EOF && len(fr.buf) == 0 {
			return nil, io.EOF
		}
		return nil, err
	}
	magic := binary.LittleEndian.Uint32(fr.buf)
	if magic&skippableMagicMask == skippableMagic {
		return nil, fr.skip()
	}
	if magic != zstdFrameMagic {
		return nil, fmt.Errorf("bad zstd magic number %#08x", magic)
	}
	if err := fr.read(1); err != nil {
		return nil, err
	}
	fhd := fr.buf[4]
	if fhd&0x08 != 0 {
		return nil, errors.New("zstd frame header has its reserved bit set")
	}
	if err := fr.read(frameHeaderLen(fhd)); err != nil {
		return nil, err
	}
	if err := fr.readBlocks(); err != nil {
		return nil, err
	}
	if fhd&0x04 != 0 { // content checksum
		if err := fr.read(4); err != nil {
			return nil, err
		}
	}
	return fr.buf, nil
}

// skip skips a skippable frame, whose magic number fr.buf holds.
func (fr *frameReader) skip() error {
	if err := fr.read(4); err != nil {
		return err
	}
	n := int64(binary.LittleEndian.Uint32(fr.buf[4:]))
	skipped, err := fr.r.Discard(int(n))
	fr.offset += int64(skipped)
	if err != nil {
		return tornOr(err)
	}
	return nil
}

// frameHeaderLen is the length of the rest of a frame header whose
// descriptor is fhd: the window descriptor, the dictionary id and the
// frame content size.
func frameHeaderLen(fhd byte) int {
	single := fhd&0x20 != 0
	headerLen := [4]int{0, 1, 2, 4}[fhd&3] // dictionary id
	switch fhd >> 6 {                      // frame content size
	case 0:
		if single {
			headerLen++
		}
	case 1:
		headerLen += 2
	case 2:
		headerLen += 4
	case 3:
		headerLen += 8
	}
	if !single {
		headerLen++ // window descriptor
	}
	return headerLen
}

// readBlocks appends a frame's blocks, up to its last, to fr.buf.
func (fr *frameReader) readBlocks() error {
	for {
		at := len(fr.buf)
		if err := fr.read(3); err != nil {
			return err
		}
		bh := uint32(fr.buf[at]) | uint32(fr.buf[at+1])<<8 | uint32(fr.buf[at+2])<<16
		last := bh&1 != 0
		size := int(bh >> 3)
		if size > maxBlockSize {
			return fmt.Errorf("zstd block of %d bytes exceeds the maximum", size)
		}
		switch bh >> 1 & 3 {
		case 0, 2: // raw, compressed
		case 1: // RLE: one byte repeated size times
			size = 1
		default:
			return errors.New("zstd block has the reserved block type")
		}
		if err := fr.read(size); err != nil {
			return err
		}
		if last {
			return nil
		}
	}
}

// read appends exactly n more bytes of the stream to fr.buf.
func (fr *frameReader) read(n int) error {
	at := len(fr.buf)
	fr.buf = slices.Grow(fr.buf, n)[:at+n]
	got, err := io.ReadFull(fr.r, fr.buf[at:])
	fr.offset += int64(got)
	fr.buf = fr.buf[:at+got]
	if err == io.EOF && at == 0 {
		return io.EOF
	}
	if err != nil {
		return tornOr(err)
	}
	return nil
}

// tornOr maps a short read to errTornFrame and passes I/O errors on.
func tornOr(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return errTornFrame
	}
	return err
}

// atEOF reports whether the stream has no more bytes.
func (fr *frameReader) atEOF() bool {
	_, err := fr.r.Peek(1)
	return err == io.EOF
}
