package containers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Labels are bounded: a container's labels are chosen by whoever created
// it, and the agent keeps what Inspect returns.
const (
	MaxLabels          = 64   // labels kept per container, smallest keys first
	MaxLabelKeyBytes   = 256  // a longer key is dropped
	MaxLabelValueBytes = 1024 // a label with a longer value is dropped
)

// MaxList is the most containers List returns; an engine running more is
// an error rather than a partial list.
const MaxList = 10000

// Container is what Inspect tells about a container.
type Container struct {
	ID        string // full 64-hex ID
	Name      string // without the leading "/"
	Image     string // the image as the user named it (Config.Image), e.g. "busybox:1"
	ImageID   string // "sha256:…"
	Created   time.Time
	Running   bool
	Pid       int       // the init process's PID in the engine's PID namespace; 0 when not running
	StartedAt time.Time // zero if never started
	// FinishedAt is when it last stopped, zero if it never did;
	// RestartCount how often its restart policy started it again. Both
	// zero: the instance that runs (or the next to) is its first.
	FinishedAt    time.Time
	RestartCount  int
	Labels        map[string]string
	LabelsDropped int // labels left out of Labels by the bounds above
	// AttachedStdin: it was created to read its client's stdin once
	// (Config.OpenStdin and StdinOnce: `docker run -i`, how MCP clients
	// run a stdio server); the engine closes that stdin when the client
	// that attached it goes, and no one can attach it again.
	AttachedStdin bool
}

// Inspect returns the container ref names (GET /containers/{ref}/json):
// a full ID, which the answer must carry, or a name or ID prefix
// (ValidRef), which the engine resolves now: a name can be given to
// another container at any time, so the answer is only what it names at
// this moment. An error wrapping ErrNotFound means there is none: a
// container already gone is not an error for callers that want it
// ended.
func (e *Engine) Inspect(ctx context.Context, ref string) (Container, error) {
	op := "inspect " + short(ref)
	if !ValidRef(ref) {
		return Container{}, &Error{Socket: e.socket, Op: op, Err: fmt.Errorf("%q names no container (a full ID, a name or an ID prefix)", truncate(ref, 80))}
	}
	id := ref
	r, err := e.call(ctx, op, http.MethodGet, "/containers/"+ref+"/json", nil, maxBody, 0)
	if err != nil {
		return Container{}, err
	}
	switch r.status {
	case http.StatusOK:
	case http.StatusNotFound:
		return Container{}, e.notFound(op, r)
	default:
		return Container{}, e.apiError(op, r)
	}
	c, err := parseInspect(r.body)
	if err != nil {
		return Container{}, &Error{Socket: e.socket, Op: op, Status: r.status, Err: err}
	}
	if ValidID(id) && c.ID != id {
		return Container{}, &Error{Socket: e.socket, Op: op, Status: r.status,
			Err: fmt.Errorf("engine answered about container %s", short(c.ID))}
	}
	return c, nil
}

// parseInspect decodes the answer of GET /containers/{id}/json.
func parseInspect(body []byte) (Container, error) {
	var v struct {
		ID      string `json:"Id"`
		Name    string
		Created string
		Image   string
		State   struct {
			Running    bool
			Pid        int
			StartedAt  string
			FinishedAt string
		}
		RestartCount int
		Config       struct {
			Image     string
			Labels    map[string]string
			OpenStdin bool
			StdinOnce bool
		}
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return Container{}, fmt.Errorf("decoding the answer: %w", err)
	}
	if !ValidID(v.ID) {
		return Container{}, fmt.Errorf("engine answered with container ID %q", truncate(v.ID, 80))
	}
	c := Container{
		ID:      v.ID,
		Name:    strings.TrimPrefix(v.Name, "/"),
		Image:   v.Config.Image,
		ImageID: v.Image,
		Running: v.State.Running,
		Pid:     v.State.Pid,

		AttachedStdin: v.Config.OpenStdin && v.Config.StdinOnce,
	}
	var err error
	if c.Created, err = parseTime(v.Created); err != nil {
		return Container{}, fmt.Errorf("container %s: Created: %w", short(v.ID), err)
	}
	if c.StartedAt, err = parseTime(v.State.StartedAt); err != nil {
		return Container{}, fmt.Errorf("container %s: State.StartedAt: %w", short(v.ID), err)
	}
	if c.FinishedAt, err = parseTime(v.State.FinishedAt); err != nil {
		return Container{}, fmt.Errorf("container %s: State.FinishedAt: %w", short(v.ID), err)
	}
	if c.RestartCount = v.RestartCount; c.RestartCount < 0 {
		return Container{}, fmt.Errorf("container %s: RestartCount %d", short(v.ID), c.RestartCount)
	}
	if c.Pid < 0 || !c.Running && c.Pid != 0 {
		return Container{}, fmt.Errorf("container %s: State.Pid %d while running=%v", short(v.ID), c.Pid, c.Running)
	}
	c.Labels, c.LabelsDropped = boundLabels(v.Config.Labels)
	return c, nil
}

// parseTime parses the engine's RFC 3339 times; the engine's zero time
// ("0001-01-01T00:00:00Z", never started) and "" are the zero time.Time.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	if t.IsZero() {
		return time.Time{}, nil
	}
	return t, nil
}

// boundLabels keeps at most MaxLabels labels within the length bounds,
// smallest keys first, and counts the rest.
func boundLabels(in map[string]string) (map[string]string, int) {
	if len(in) == 0 {
		return nil, 0
	}
	keys := make([]string, 0, len(in))
	dropped := 0
	for k, v := range in {
		if len(k) > MaxLabelKeyBytes || len(v) > MaxLabelValueBytes {
			dropped++
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > MaxLabels {
		dropped += len(keys) - MaxLabels
		keys = keys[:MaxLabels]
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		out[k] = in[k]
	}
	return out, dropped
}

// Summary is a running container as List tells it.
type Summary struct {
	ID            string   // full 64-hex ID
	Names         []string // without the leading "/"
	Image         string   // the image as the user named it
	ImageID       string
	Created       time.Time // at second precision
	State         string    // "running"
	Labels        map[string]string
	LabelsDropped int
}

// List returns the running containers (GET /containers/json), at most
// MaxList: an engine with more is an error, not a partial list, so that a
// caller never takes a container left out for a container gone.
func (e *Engine) List(ctx context.Context) ([]Summary, error) {
	const op = "list containers"
	r, err := e.call(ctx, op, http.MethodGet, "/containers/json", nil, maxListBody, 0)
	if err != nil {
		return nil, err
	}
	if r.status != http.StatusOK {
		return nil, e.apiError(op, r)
	}
	out, err := parseList(r.body)
	if err != nil {
		return nil, &Error{Socket: e.socket, Op: op, Status: r.status, Err: err}
	}
	return out, nil
}

// parseList decodes the answer of GET /containers/json, one entry at a
// time, stopping past MaxList.
func parseList(body []byte) ([]Summary, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, fmt.Errorf("decoding the answer: not a JSON array")
	}
	var out []Summary
	for dec.More() {
		if len(out) == MaxList {
			return nil, fmt.Errorf("more than %d running containers", MaxList)
		}
		var v struct {
			ID      string `json:"Id"`
			Names   []string
			Image   string
			ImageID string
			Created int64
			State   string
			Labels  map[string]string
		}
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("decoding the answer: %w", err)
		}
		if !ValidID(v.ID) {
			return nil, fmt.Errorf("engine listed container ID %q", truncate(v.ID, 80))
		}
		s := Summary{ID: v.ID, Image: v.Image, ImageID: v.ImageID, State: v.State}
		if v.Created > 0 {
			s.Created = time.Unix(v.Created, 0)
		}
		for _, n := range v.Names {
			s.Names = append(s.Names, strings.TrimPrefix(n, "/"))
		}
		s.Labels, s.LabelsDropped = boundLabels(v.Labels)
		out = append(out, s)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("decoding the answer: %w", err)
	}
	return out, nil
}
