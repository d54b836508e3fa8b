package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/image"
	dockerregistry "github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/images/registry"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// An image the engine pulled cannot carry dsh-sandbox's owner label (a
// label would change its id), so the executor keeps a record of each
// pull in StateDir/docker-pulled: one file per reference, and one per
// image a later pull of the same tag replaced (for Reap). Images lists,
// RemoveImage removes and Reap cleans up only what these records name.

// pulledDir is the directory of the pull records.
func (e *Executor) pulledDir() string { return filepath.Join(e.opts.StateDir, "docker-pulled") }

// pullRecord is what the executor knows of one pulled reference.
type pullRecord struct {
	// Name is the canonical reference pulled ("127.0.0.1:5000/tools:1"
	// or "…/tools@sha256:…"); Pinned the repository with the digest the
	// engine pulled.
	Name   string `json:"name"`
	Pinned string `json:"pinned"`
	// Digest is the manifest (or index) digest; ID the engine's image id.
	Digest string `json:"digest"`
	ID     string `json:"id"`
	// Source is the registry's name of the reference, Signers the
	// fingerprints of the keys that verified it.
	Source  string    `json:"source"`
	Signers []string  `json:"signers,omitempty"`
	Pulled  time.Time `json:"pulled"`
}

// recordFile is the file of a reference's record.
func (e *Executor) recordFile(name string) string {
	sum := sha256.Sum256([]byte(name))
	return filepath.Join(e.pulledDir(), hex.EncodeToString(sum[:16])+".json")
}

// replacedFile is the file marking the image id as replaced by a pull.
func (e *Executor) replacedFile(id string) string {
	return filepath.Join(e.pulledDir(), "replaced-"+strings.TrimPrefix(id, "sha256:")+".json")
}

// writeRecord stores v as file, atomically.
func writeRecord(file string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

// readRecord reads the record of name; ok is false when there is none.
func (e *Executor) readRecord(name string) (pullRecord, bool) {
	var rec pullRecord
	data, err := os.ReadFile(e.recordFile(name))
	if err != nil || json.Unmarshal(data, &rec) != nil || rec.Name != name {
		return pullRecord{}, false
	}
	return rec, true
}

// records lists every pull record.
func (e *Executor) records() []pullRecord {
	ents, _ := os.ReadDir(e.pulledDir())
	var out []pullRecord
	for _, ent := range ents {
		if strings.HasPrefix(ent.Name(), "replaced-") || !strings.HasSuffix(ent.Name(), ".json") {
			continue
		}
		var rec pullRecord
		data, err := os.ReadFile(filepath.Join(e.pulledDir(), ent.Name()))
		if err == nil && json.Unmarshal(data, &rec) == nil && rec.Name != "" {
			out = append(out, rec)
		}
	}
	return out
}

// PulledImage returns the image ref names in the engine: a pulled one
// (with its digest, source and the keys that verified it), else one
// dsh-sandbox imported under that name (its digest is the engine's image
// id). An image the engine no longer has, or no longer under that name,
// is an error wrapping images.ErrNotFound.
func (e *Executor) PulledImage(ctx context.Context, ref string) (*images.Image, error) {
	canon, err := images.CanonicalReference(ref)
	if err != nil {
		return nil, err
	}
	if rec, ok := e.readRecord(canon); ok {
		img, err := e.cli.ImageInspect(ctx, rec.Pinned)
		if err == nil && img.ID == rec.ID && (strings.Contains(canon, "@") || e.tagged(ctx, canon, rec.ID)) {
			return rec.image(img.Size), nil
		}
		if err != nil && !isNotFound(err) {
			return nil, unavailable(err, "image %q", canon)
		}
	}
	if strings.Contains(canon, "@") {
		// A digest that a pull by tag brought.
		for _, rec := range e.records() {
			if p, err := images.CanonicalReference(rec.Pinned); err != nil || p != canon {
				continue
			}
			if img, err := e.cli.ImageInspect(ctx, rec.Pinned); err == nil && img.ID == rec.ID {
				out := rec.image(img.Size)
				out.Name = canon
				return out, nil
			}
		}
	} else {
		img, err := e.cli.ImageInspect(ctx, canon)
		if err == nil && img.Config != nil && img.Config.Labels[reap.LabelOwner] == reap.LabelOwnerValue {
			return &images.Image{Name: canon, Digest: img.ID, Size: img.Size}, nil
		}
		if err != nil && !isNotFound(err) {
			return nil, unavailable(err, "image %q", canon)
		}
	}
	return nil, fmt.Errorf("%w: %s is not in the engine", images.ErrNotFound, canon)
}

// tagged reports whether the engine's name canon is the image id.
func (e *Executor) tagged(ctx context.Context, canon, id string) bool {
	img, err := e.cli.ImageInspect(ctx, canon)
	return err == nil && img.ID == id
}

func (rec pullRecord) image(size int64) *images.Image {
	return &images.Image{Name: rec.Name, Digest: rec.Digest, Source: rec.Source, Signers: rec.Signers, Size: size, Imported: rec.Pulled}
}

// PullImage pulls ref into the engine as o says. The reference is first
// checked with registry.Resolve (its digest, its signature under o.Keys,
// its declared size against o.MaxBytes), without the engine; then the
// engine pulls exactly that digest, with the operator's credentials of
// that registry alone (o.Registries), and the image it stored must
// carry the digest (else it is removed and the pull refused). A tag is
// then pointed at the image. The engine's progress stream becomes
// "layer" events of o.Progress; a layer that grows past its declared
// size, or a pull past the cap, is cancelled. A registry the operator
// lists as plain HTTP that the engine would reach over HTTPS only is
// refused before the engine pulls: the engine's own insecure-registries
// decide that.
func (e *Executor) PullImage(ctx context.Context, ref string, o images.PullOptions) (*images.Image, error) {
	res, err := registry.Resolve(ctx, ref, o)
	if err != nil {
		return nil, err
	}
	event := res.Emit(o)
	if o.Registries.Insecure(res.Registry) {
		if err := e.engineInsecure(ctx, res.Registry); err != nil {
			return nil, err
		}
	}
	have, err := e.cli.ImageInspect(ctx, res.Pinned)
	if err != nil {
		if !isNotFound(err) {
			return nil, unavailable(err, "image %q", res.Pinned)
		}
		if err := e.enginePull(ctx, res, o, event); err != nil {
			return nil, err
		}
		if have, err = e.cli.ImageInspect(ctx, res.Pinned); err != nil {
			return nil, unavailable(err, "image pull %s: the engine does not have %s after the pull", res.Reference, res.Pinned)
		}
	}
	if !hasRepoDigest(have.RepoDigests, res.Pinned) {
		e.removeImage(context.WithoutCancel(ctx), have.ID)
		return nil, fmt.Errorf("%w: %s: the engine's image %s does not carry the pulled digest %s (it has %v)", images.ErrVerify, res.Reference, shortID(have.ID), res.Digest, have.RepoDigests)
	}
	old, hadOld := e.readRecord(res.Reference)
	if !strings.Contains(res.Reference, "@") {
		if err := e.cli.ImageTag(ctx, have.ID, res.Reference); err != nil {
			return nil, unavailable(err, "image pull %s: name image %s", res.Reference, shortID(have.ID))
		}
	}
	rec := pullRecord{Name: res.Reference, Pinned: res.Pinned, Digest: res.Digest, ID: have.ID, Source: res.Source, Signers: res.Signers, Pulled: time.Now().UTC()}
	if err := writeRecord(e.recordFile(rec.Name), rec); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: image pull %s: record: %v", res.Reference, err)
	}
	if hadOld && old.ID != have.ID {
		// The image the tag named before is Reap's once unused.
		_ = writeRecord(e.replacedFile(old.ID), old)
		e.reapReplaced(ctx, nil)
	}
	event(images.PullEvent{Event: "stored"})
	return rec.image(have.Size), nil
}

// hasRepoDigest reports whether one of the engine's repo digests is
// pinned ("repository@sha256:…", compared in canonical form).
func hasRepoDigest(repoDigests []string, pinned string) bool {
	want, err := images.CanonicalReference(pinned)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(repoDigests, func(rd string) bool {
		c, err := images.CanonicalReference(rd)
		return err == nil && c == want
	})
}

// engineInsecure refuses a pull from host over plain HTTP that the
// engine would not make: its insecure registries are its own
// configuration (daemon.json "insecure-registries"; 127.0.0.0/8 by
// default).
func (e *Executor) engineInsecure(ctx context.Context, host string) error {
	info, err := e.cli.Info(ctx)
	if err != nil {
		return unavailable(err, "engine info")
	}
	if rc := info.RegistryConfig; rc != nil {
		if ic, ok := rc.IndexConfigs[host]; ok && ic != nil && !ic.Secure {
			return nil
		}
		h, _, err := net.SplitHostPort(host)
		if err != nil {
			h = host
		}
		if ip := net.ParseIP(h); ip != nil {
			for _, n := range rc.InsecureRegistryCIDRs {
				if n != nil && (*net.IPNet)(n).Contains(ip) {
					return nil
				}
			}
		}
	}
	return sandbox.Errorf(sandbox.ErrInvalid, "docker: --insecure-registries lists %s, but the engine reaches it over HTTPS only; add it to the engine's insecure-registries (daemon.json) as well", host)
}

// enginePull has the engine pull res.Pinned and translates its progress
// stream; an error in the stream fails the pull.
func (e *Executor) enginePull(ctx context.Context, res *registry.Resolved, o images.PullOptions, event func(images.PullEvent)) error {
	auth, err := registryAuth(res, o.Registries)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	rc, err := e.cli.ImagePull(pctx, res.Pinned, image.PullOptions{RegistryAuth: auth, Platform: "linux/" + runtime.GOARCH})
	if err != nil {
		return engineError(res, err)
	}
	defer rc.Close()
	maxBytes := o.MaxBytes
	if maxBytes <= 0 {
		maxBytes = images.DefaultMaxPullBytes
	}
	progress := &pullProgress{res: res, maxBytes: maxBytes, done: make([]int64, len(res.Layers)), event: event}
	dec := json.NewDecoder(rc)
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			if cause := context.Cause(pctx); cause != nil && !errors.Is(cause, context.Canceled) {
				return cause
			}
			return engineError(res, fmt.Errorf("progress stream: %w", err))
		}
		if m.Error != nil {
			return engineError(res, m.Error)
		}
		if err := progress.update(&m); err != nil {
			cancel(err)
			return err
		}
	}
}

// registryAuth is the engine's encoding of the operator's credentials
// (in regs) of res's registry, or "" when regs has none for it.
func registryAuth(res *registry.Resolved, regs *images.Registries) (string, error) {
	ac, ok := regs.Credentials(res.Registry)
	if !ok {
		return "", nil
	}
	auth, err := dockerregistry.EncodeAuthConfig(dockerregistry.AuthConfig{
		Username: ac.Username, Password: ac.Password, IdentityToken: ac.IdentityToken, RegistryToken: ac.RegistryToken,
		ServerAddress: res.Registry,
	})
	if err != nil {
		return "", sandbox.Errorf(sandbox.ErrInternal, "docker: image pull %s: credentials: %v", res.Reference, err)
	}
	return auth, nil
}

// pullProgress follows the layers of res through the engine's progress
// stream of its pull, sending "layer" events.
type pullProgress struct {
	res      *registry.Resolved
	maxBytes int64   // the cap of the pull
	done     []int64 // the bytes the engine read of each layer
	event    func(images.PullEvent)
}

// update takes the message m of the progress stream. It fails with
// images.ErrVerify when a layer grows past its declared size or the
// layers past the cap.
func (p *pullProgress) update(m *jsonmessage.JSONMessage) error {
	res := p.res
	i := slices.IndexFunc(res.Layers, func(d string) bool {
		return m.ID != "" && strings.HasPrefix(strings.TrimPrefix(d, "sha256:"), m.ID)
	})
	if i < 0 || m.Status != "Downloading" || m.Progress == nil {
		if i >= 0 && m.Status == "Pulling fs layer" {
			p.event(images.PullEvent{Event: "layer", Layer: res.Layers[i], Index: i + 1, Layers: len(res.Layers), Total: res.LayerSizes[i]})
		}
		if i >= 0 && (m.Status == "Download complete" || m.Status == "Already exists") {
			p.done[i] = res.LayerSizes[i]
			p.event(images.PullEvent{Event: "layer", Layer: res.Layers[i], Index: i + 1, Layers: len(res.Layers), Done: p.done[i], Total: res.LayerSizes[i]})
		}
		return nil
	}
	p.done[i] = m.Progress.Current
	var sum int64
	for _, d := range p.done {
		sum += d
	}
	if p.done[i] > res.LayerSizes[i] || sum > p.maxBytes {
		return fmt.Errorf("%w: %s: layer %d (%s): the engine read %d bytes, more than declared (%d) or the cap (%d)", images.ErrVerify, res.Reference, i+1, res.Layers[i], p.done[i], res.LayerSizes[i], p.maxBytes)
	}
	p.event(images.PullEvent{Event: "layer", Layer: res.Layers[i], Index: i + 1, Layers: len(res.Layers), Done: p.done[i], Total: res.LayerSizes[i]})
	return nil
}

// engineError classifies an error of the engine's pull: content that
// does not match its digest is images.ErrVerify, a missing image
// images.ErrNotFound, the rest unavailable. The message names the
// reference, never credentials.
func engineError(res *registry.Resolved, err error) error {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	low := strings.ToLower(msg)
	switch {
	case strings.Contains(low, "digest") && (strings.Contains(low, "mismatch") || strings.Contains(low, "verif") || strings.Contains(low, "invalid")),
		strings.Contains(low, "unexpected eof"), strings.Contains(low, "size"):
		return fmt.Errorf("%w: %s: the engine refused the content it was sent (tampered or corrupt): %s", images.ErrVerify, res.Reference, msg)
	case isNotFound(err), strings.Contains(low, "not found"), strings.Contains(low, "manifest unknown"):
		return fmt.Errorf("%w: %s: the engine could not find %s: %s", images.ErrNotFound, res.Reference, res.Pinned, msg)
	}
	return unavailable(err, "image pull %s (%s)", res.Reference, res.Pinned)
}

// pulledImages lists the pulled images the engine still has, for Images.
func (e *Executor) pulledImages(ctx context.Context) []images.Image {
	var out []images.Image
	for _, rec := range e.records() {
		if img, err := e.PulledImage(ctx, rec.Name); err == nil && img.Source != "" {
			out = append(out, *img)
		}
	}
	slices.SortStableFunc(out, func(a, b images.Image) int { return b.Imported.Compare(a.Imported) })
	return out
}

// removePulled removes the pulled image canon (its name in the engine,
// the image once nothing else names it) and its record; false when
// canon is not a pulled image.
func (e *Executor) removePulled(ctx context.Context, canon string) (bool, error) {
	rec, ok := e.readRecord(canon)
	if !ok {
		return false, nil
	}
	if err := e.refuseInUse(ctx, canon, rec.ID); err != nil {
		return true, err
	}
	name := canon
	if strings.Contains(canon, "@") {
		name = rec.Pinned
	}
	if _, err := e.cli.ImageRemove(ctx, name, image.RemoveOptions{PruneChildren: true}); err != nil && !isNotFound(err) {
		return true, unavailable(err, "remove image %q", canon)
	}
	if err := os.Remove(e.recordFile(canon)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return true, sandbox.Errorf(sandbox.ErrUnavailable, "docker: remove image %q: record: %v", canon, err)
	}
	return true, nil
}

// reapReplaced removes the images pulls replaced (a tag pulled again
// with another digest) once no container uses them and no record still
// names them, and the records of images the engine no longer has;
// removed, when not nil, gets the ids removed.
func (e *Executor) reapReplaced(ctx context.Context, removed *[]string) {
	live := map[string]bool{}
	for _, rec := range e.records() {
		if _, err := e.cli.ImageInspect(ctx, rec.ID); isNotFound(err) {
			_ = os.Remove(e.recordFile(rec.Name))
			continue
		}
		live[rec.ID] = true
	}
	ents, _ := os.ReadDir(e.pulledDir())
	for _, ent := range ents {
		if !strings.HasPrefix(ent.Name(), "replaced-") {
			continue
		}
		id := "sha256:" + strings.TrimSuffix(strings.TrimPrefix(ent.Name(), "replaced-"), ".json")
		file := filepath.Join(e.pulledDir(), ent.Name())
		if live[id] {
			_ = os.Remove(file)
			continue
		}
		_, err := e.cli.ImageRemove(ctx, id, image.RemoveOptions{PruneChildren: true})
		switch {
		case err == nil:
			if removed != nil {
				*removed = append(*removed, id)
			}
			_ = os.Remove(file)
		case isNotFound(err):
			_ = os.Remove(file)
		}
	}
}
