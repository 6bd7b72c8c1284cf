package hub

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/tputool/tputool/internal/errs"
)

// Error kinds. An *Error unwraps to its kind and to errs.ErrHub, so callers
// test errors.Is(err, hub.ErrEntryNotFound) and cmd maps every one of them
// to exit code 5.
var (
	// ErrRepoNotFound: the repository does not exist, or it is private and
	// the token (if any) has no access. The Hub answers both the same way.
	ErrRepoNotFound = errors.New("repository not found")
	// ErrGatedRepo: the repository is gated and the token's user has not
	// been granted access.
	ErrGatedRepo = errors.New("gated repository")
	// ErrRevisionNotFound: the branch, tag or commit does not exist.
	ErrRevisionNotFound = errors.New("revision not found")
	// ErrEntryNotFound: the file does not exist at that revision.
	ErrEntryNotFound = errors.New("file not found in repository")
	// ErrUnauthorized: 401, the token is missing or invalid.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: 403, the token lacks a permission.
	ErrForbidden = errors.New("forbidden")
	// ErrHTTP: any other unexpected HTTP status (including 5xx and 429 once
	// retries are spent).
	ErrHTTP = errors.New("unexpected HTTP status")
	// ErrNetwork: connection failure, reset, timeout or truncated body once
	// retries are spent.
	ErrNetwork = errors.New("network error")
	// ErrIntegrity: the downloaded bytes do not match the ETag's hash or the
	// announced size.
	ErrIntegrity = errors.New("integrity check failed")
	// ErrNotCached: offline (or the Hub unreachable) and the file or
	// snapshot is not in the cache.
	ErrNotCached = errors.New("not in the local cache")
	// ErrMetadata: the server's answer lacks a header the cache needs
	// (X-Repo-Commit, ETag, size): usually a proxy or a non-Hub endpoint.
	ErrMetadata = errors.New("invalid Hub response")
)

// Error is a Hub failure with the repository, revision and file it concerns.
type Error struct {
	Kind     error
	Repo     string
	Revision string
	File     string
	// Status is the HTTP status, 0 when there was no response.
	Status int
	// Detail is a human explanation (server message, hint); it never holds
	// the token or signed URL query strings.
	Detail string
	// Err is the underlying cause, if any.
	Err error

	// retryAfter is the server's Retry-After, when it sent one.
	retryAfter time.Duration
	// refused marks a 401/403/410 from a host other than the endpoint: a
	// signed download URL that expired, which a fresh HEAD replaces.
	refused bool
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	if e.Repo != "" {
		fmt.Fprintf(&b, ": %s", e.Repo)
		if e.Revision != "" {
			fmt.Fprintf(&b, "@%s", e.Revision)
		}
		if e.File != "" {
			fmt.Fprintf(&b, " file %q", e.File)
		}
	}
	if e.Status != 0 {
		fmt.Fprintf(&b, " (HTTP %d)", e.Status)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the kind, errs.ErrHub and the cause.
func (e *Error) Unwrap() []error {
	out := []error{e.Kind, errs.ErrHub}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// Hints appended to errors whose fix is on the user's side, in the
// package's terms (a command line restates hintAuth with its flag).
const (
	hintAuth  = "set HF_TOKEN or Client.Token (a token from https://huggingface.co/settings/tokens)"
	hintGated = "accept the conditions on the model page with the account of your token, then retry"
)

// retryable reports whether an error may go away if the request is repeated:
// network failures, 5xx, 408 and 429.
func retryable(err error) bool {
	var he *Error
	if !errors.As(err, &he) {
		return false
	}
	switch {
	case he.Kind == ErrNetwork:
		return true
	case he.Kind == ErrHTTP:
		return he.Status == 408 || he.Status == 429 || he.Status >= 500
	}
	return false
}

// hintUnreachable ends the error of a Hub that cannot be reached at all
// (a command line restates it with its flags).
const hintUnreachable = "the Hub cannot be reached: work offline (HF_HUB_OFFLINE=1, Client.Offline) for a model in the cache, or give a local path"

// unreachable reports a failure to reach the endpoint at all: its name
// does not resolve (DNS) or nothing listens (connection refused). Unlike a
// reset or a timeout mid-transfer, repeating it at once rarely helps, so
// it is retried at most once.
func unreachable(err error) bool {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

// fallbackAllowed reports whether a failed metadata call may be answered
// from the cache, as huggingface_hub does: on connection problems, timeouts,
// HTTP errors (5xx, 401/403 for a now-private repo, repo not found) and
// malformed answers, but not when the Hub says the revision or file does
// not exist.
func fallbackAllowed(err error) bool {
	return !errors.Is(err, ErrRevisionNotFound) && !errors.Is(err, ErrEntryNotFound) &&
		!errors.Is(err, ErrIntegrity)
}
