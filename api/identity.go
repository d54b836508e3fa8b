package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
)

// ClientKind says how the service identified a client.
type ClientKind string

// Client kinds.
const (
	// ClientSocket is a Unix-socket peer, identified by SO_PEERCRED.
	ClientSocket ClientKind = "socket"
	// ClientToken is a client that sent a bearer token of the listener's
	// token file.
	ClientToken ClientKind = "token"
	// ClientAnonymous is a client of a non-Unix listener served without
	// tokens (only possible through the Go API, e.g. in tests).
	ClientAnonymous ClientKind = "anonymous"
)

// Client is the identity of the sender of a request. Every request the
// handlers see has one (ClientFrom).
type Client struct {
	Kind ClientKind
	// Name is the token client's name; "uid N" for a socket peer.
	Name string
	// UID, GID and PID are a socket peer's credentials; -1 otherwise.
	UID, GID, PID int
	// Roots are the client's own workspace roots (token clients); nil
	// means none beyond the service's.
	Roots []string
	// Harness marks an authenticated harness client, which may add DSH_*
	// keys beyond the service's own to a call's snapshot
	// (RunRequest.DSHEnv): every Unix-socket peer (identified by
	// SO_PEERCRED; a sandboxed call is refused before this) and every
	// token client whose token file line says "harness". Anonymous
	// clients and a one-word (legacy) token are not.
	Harness bool
}

// Key is the client's identity for ownership of sessions and jobs: the
// uid of a socket peer (every process of one user is one client), the
// name of a token client.
func (c Client) Key() string {
	switch c.Kind {
	case ClientSocket:
		return "socket:" + strconv.Itoa(c.UID)
	case ClientToken:
		return "token:" + c.Name
	}
	return string(c.Kind)
}

type clientKey struct{}

// ClientFrom returns the client of a request's context.
func ClientFrom(ctx context.Context) (Client, bool) {
	c, ok := ctx.Value(clientKey{}).(Client)
	return c, ok
}

// identify gives every request its Client before any body is read:
// a socket peer that is a sandboxed call gets 403; with tokens, a
// request without a valid one gets 401. Both answers close the
// connection without reading the body.
func identify(tokens []TokenClient, h http.Handler) http.Handler {
	sums := make([][sha256.Size]byte, len(tokens))
	for i, tc := range tokens {
		sums[i] = sha256.Sum256([]byte(tc.Token))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuse := func(err error) {
			// The connection ends after the answer. Without a read
			// deadline now, net/http would first drain a small body
			// still arriving (up to 256 KiB) until ReadTimeout.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
			w.Header().Set("Connection", "close")
			writeError(w, err)
		}
		p, isSocket := r.Context().Value(peerKey{}).(peer)
		if isSocket && p.refusal != nil {
			refuse(p.refusal)
			return
		}
		var cl Client
		switch {
		case len(tokens) > 0:
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			sum := sha256.Sum256([]byte(got))
			found := -1
			for i := range sums { // no early exit: the same time for every token
				if subtle.ConstantTimeCompare(sum[:], sums[i][:]) == 1 && ok {
					found = i
				}
			}
			if found < 0 {
				refuse(fmt.Errorf("%w: missing or wrong bearer token", types.ErrUnauthorized))
				return
			}
			tc := tokens[found]
			cl = Client{Kind: ClientToken, Name: tc.Name, UID: -1, GID: -1, PID: -1, Roots: tc.Roots, Harness: tc.Harness}
		case isSocket:
			cl = Client{Kind: ClientSocket, Name: "uid " + strconv.Itoa(p.uid), UID: p.uid, GID: p.gid, PID: p.pid, Harness: true}
		default:
			cl = Client{Kind: ClientAnonymous, Name: "anonymous", UID: -1, GID: -1, PID: -1}
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKey{}, cl)))
	})
}
