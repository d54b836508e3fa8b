package images

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// maxKeyFile bounds a public key file.
const maxKeyFile = 64 << 10

// PublicKey is a public key signatures are verified with, loaded by
// [LoadPublicKey]. It is safe to copy and to use from several
// goroutines.
type PublicKey struct {
	// File is the PEM file it was read from.
	File string
	// Fingerprint is "sha256:<hex>" of the key's DER (PKIX) encoding, as
	// Image.Signers records it.
	Fingerprint string
	verifier    signature.Verifier
}

// LoadPublicKey reads a PEM public key (ECDSA, Ed25519 or RSA, as `cosign
// generate-key-pair` writes to cosign.pub). Errors wrap [ErrInvalid] and
// name the file.
func LoadPublicKey(file string) (PublicKey, error) {
	f, err := os.Open(file)
	if err != nil {
		return PublicKey{}, fmt.Errorf("%w: verify key: %v", ErrInvalid, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return PublicKey{}, fmt.Errorf("%w: verify key %s: %v", ErrInvalid, file, err)
	}
	if len(data) > maxKeyFile {
		return PublicKey{}, fmt.Errorf("%w: verify key %s: larger than %d bytes", ErrInvalid, file, maxKeyFile)
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(data)
	if err != nil {
		return PublicKey{}, fmt.Errorf("%w: verify key %s: not a PEM public key: %v", ErrInvalid, file, err)
	}
	return NewPublicKey(file, pub)
}

// NewPublicKey makes a PublicKey of pub; file only names it.
func NewPublicKey(file string, pub crypto.PublicKey) (PublicKey, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return PublicKey{}, fmt.Errorf("%w: verify key %s: %v", ErrInvalid, file, err)
	}
	v, err := signature.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return PublicKey{}, fmt.Errorf("%w: verify key %s: %v", ErrInvalid, file, err)
	}
	sum := sha256.Sum256(der)
	return PublicKey{File: file, Fingerprint: "sha256:" + hex.EncodeToString(sum[:]), verifier: v}, nil
}

// Verify checks sig, a signature of payload, with k; nil when it
// verifies. The zero PublicKey verifies nothing.
func (k PublicKey) Verify(sig, payload []byte) error {
	if k.verifier == nil {
		return errors.New("no key")
	}
	return k.verifier.VerifySignature(bytes.NewReader(sig), bytes.NewReader(payload))
}
