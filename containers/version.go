package containers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// The API versions this client speaks. 1.24 is Docker 1.12's; 1.44 is
// the oldest Docker 29 accepts (see the package comment).
const (
	MinAPIVersion = "1.24"
	MaxAPIVersion = "1.44"
)

// Version is what the engine said about itself at negotiation.
type Version struct {
	Engine        string // the engine's release, e.g. "20.10.24+dfsg1"
	APIVersion    string // the newest API version the engine speaks
	MinAPIVersion string // the oldest API version the engine accepts ("" if it did not say)
	OS, Arch      string
	Using         string // the API version this client speaks to it
}

// Negotiate asks the engine for its version (GET /version, unversioned)
// and from then on speaks the engine's newest API version up to
// MaxAPIVersion. It returns an error when the engine's versions and this
// client's do not meet. Calls made before Negotiate negotiate first.
func (e *Engine) Negotiate(ctx context.Context) (Version, error) {
	const op = "GET /version"
	r, err := e.roundTrip(ctx, op, http.MethodGet, "/version", nil, maxBody, 0)
	if err != nil {
		return Version{}, err
	}
	if r.status != http.StatusOK {
		return Version{}, e.apiError(op, r)
	}
	var v struct {
		Version       string
		APIVersion    string `json:"ApiVersion"`
		MinAPIVersion string
		Os            string
		Arch          string
	}
	if err := json.Unmarshal(r.body, &v); err != nil {
		return Version{}, &Error{Socket: e.socket, Op: op, Status: r.status,
			Err: fmt.Errorf("decoding the answer: %w", err), Hint: "is this a Docker engine's socket? set containers.engine-socket"}
	}
	using, err := negotiate(v.APIVersion, v.MinAPIVersion)
	if err != nil {
		return Version{}, &Error{Socket: e.socket, Op: op, Status: r.status, Err: err}
	}
	e.mu.Lock()
	e.api = using
	e.mu.Unlock()
	return Version{Engine: v.Version, APIVersion: v.APIVersion, MinAPIVersion: v.MinAPIVersion,
		OS: v.Os, Arch: v.Arch, Using: using}, nil
}

// version returns the negotiated API version, negotiating first if no
// call has yet.
func (e *Engine) version(ctx context.Context) (string, error) {
	e.mu.Lock()
	api := e.api
	e.mu.Unlock()
	if api != "" {
		return api, nil
	}
	v, err := e.Negotiate(ctx)
	return v.Using, err
}

// negotiate picks the API version to speak to an engine whose newest
// version is serverMax and oldest serverMin ("" when the engine does not
// say: engines before API 1.25).
func negotiate(serverMax, serverMin string) (string, error) {
	maxV, ok := parseAPIVersion(serverMax)
	if !ok {
		return "", fmt.Errorf("engine reports API version %q, not MAJOR.MINOR", truncate(serverMax, 40))
	}
	ours, _ := parseAPIVersion(MaxAPIVersion)
	oldest, _ := parseAPIVersion(MinAPIVersion)
	if maxV.less(oldest) {
		return "", fmt.Errorf("engine speaks API %s at most, older than %s (Docker 1.12), the oldest this client speaks: upgrade the engine", serverMax, MinAPIVersion)
	}
	if serverMin != "" {
		minV, ok := parseAPIVersion(serverMin)
		if !ok {
			return "", fmt.Errorf("engine reports minimum API version %q, not MAJOR.MINOR", truncate(serverMin, 40))
		}
		if ours.less(minV) {
			return "", fmt.Errorf("engine accepts API %s and newer only, and this client speaks up to %s: upgrade mcptrace", serverMin, MaxAPIVersion)
		}
	}
	if maxV.less(ours) {
		return maxV.String(), nil
	}
	return ours.String(), nil
}

// apiVersion is a MAJOR.MINOR API version.
type apiVersion struct{ major, minor int }

func parseAPIVersion(s string) (apiVersion, bool) {
	maj, min, ok := strings.Cut(s, ".")
	if !ok {
		return apiVersion{}, false
	}
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(min)
	if err1 != nil || err2 != nil || a < 0 || b < 0 || a > 99 || b > 999 {
		return apiVersion{}, false
	}
	return apiVersion{a, b}, true
}

func (v apiVersion) less(w apiVersion) bool {
	return v.major < w.major || v.major == w.major && v.minor < w.minor
}

func (v apiVersion) String() string { return fmt.Sprintf("%d.%d", v.major, v.minor) }
