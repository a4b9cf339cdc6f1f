package api

import (
	"context"
	"net/http"
	"time"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/orphans"
	"github.com/mcptrace/mcptrace/redact"
)

// OrphanList is the answer of GET /v1/orphans: the leaked servers the
// caller may see (root: every uid's; anyone else: their own) and their
// totals, which count only those.
type OrphanList struct {
	Now     uint64           `json:"now_ns"`
	Orphans []orphans.Orphan `json:"orphans"`
	Totals  OrphanTotals     `json:"totals"`
	// Candidates are MCP servers whose evidence of a leak is still being
	// gathered (orphans.Found.Candidates): shown, never ended, and not
	// in Totals.
	Candidates []orphans.Orphan `json:"candidates,omitempty"`
	// Pending counts servers whose stdin was seen cut off too recently
	// to count (root only: others get 0); ConfirmIn is when they can be
	// confirmed at the soonest.
	Pending   int           `json:"pending,omitempty"`
	ConfirmIn time.Duration `json:"confirm_in_ns,omitempty"`
	// ContainersUnchecked counts running containers that were not looked
	// at (the engine did not answer, or there were more than one look
	// inspects); ContainersWhy says why.
	ContainersUnchecked int    `json:"containers_unchecked,omitempty"`
	ContainersWhy       string `json:"containers_why,omitempty"`
}

// OrphanTotals add up a list of orphans.
type OrphanTotals struct {
	Servers   int    `json:"servers"`
	Certain   int    `json:"certain"`
	Likely    int    `json:"likely"`
	Processes int    `json:"processes"`
	RSSBytes  uint64 `json:"rss_bytes"`
	// OldestStart is the start (CLOCK_BOOTTIME ns) of the oldest server; 0
	// when there is none.
	OldestStart uint64 `json:"oldest_start_ns"`
}

// TotalsOf adds up list.
func TotalsOf(list []orphans.Orphan) OrphanTotals {
	var t OrphanTotals
	for _, o := range list {
		t.Servers++
		if o.Confidence == orphans.Certain {
			t.Certain++
		} else {
			t.Likely++
		}
		t.Processes += o.Processes
		t.RSSBytes += o.RSSBytes
		if t.OldestStart == 0 || o.Server.Start < t.OldestStart {
			t.OldestStart = o.Server.Start
		}
	}
	return t
}

// EndOrphansRequest is the body of POST /v1/orphans/end.
type EndOrphansRequest struct {
	// IncludeLikely ends the orphans listed as likely too; without it
	// only the certain ones are ended.
	IncludeLikely bool `json:"include_likely,omitempty"`
	// CertainOnly is what every request without IncludeLikely does now;
	// it is accepted for clients that still send it, and refused
	// together with IncludeLikely.
	CertainOnly bool `json:"certain_only,omitempty"`
	// DryRun runs every check of the enforcer in audit mode and ends
	// nothing: the records say what would be ended.
	DryRun bool `json:"dry_run,omitempty"`
}

// EndOrphansResult is what POST /v1/orphans/end did: the orphans it set
// out to end and the enforcer's report, one record per process.
type EndOrphansResult struct {
	Orphans []orphans.Orphan `json:"orphans"`
	Report  enforcer.Report  `json:"report"`
}

// presentOrphans makes orphans fit for the caller, in place: argv
// redacted unless root asked for it raw, and for anyone but root shown
// only when the server's current image ran under the caller's uid; the
// live host of a superseded server only when it is the caller's.
func (s *Server) presentOrphans(c Caller, raw bool, list []orphans.Orphan) {
	for i := range list {
		o := &list[i]
		if !c.Root() && o.HostUID != c.UID {
			o.Host = lineage.ID{}
		}
		if !c.Root() {
			if p, ok := s.Graph.Get(o.Server); !ok || p.Current().UID != c.UID {
				o.Argv = nil
			}
		}
		if !raw {
			o.Argv = redact.Argv(o.Argv)
		}
	}
}

func (s *Server) handleOrphans(w http.ResponseWriter, r *http.Request) {
	c, ok := s.caller(w, r)
	if !ok {
		return
	}
	if s.Orphans == nil {
		writeError(w, http.StatusNotImplemented, "this agent does not look for orphans")
		return
	}
	found, err := s.Orphans(c.UID, c.Root())
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	s.presentOrphans(c, wantsRaw(c, r), found.Orphans)
	s.presentOrphans(c, wantsRaw(c, r), found.Candidates)
	l := OrphanList{Now: s.Now(), Orphans: found.Orphans, Totals: TotalsOf(found.Orphans), Candidates: found.Candidates,
		ContainersUnchecked: found.ContainersUnchecked, ContainersWhy: found.ContainersWhy}
	if c.Root() && found.Pending > 0 {
		l.Pending, l.ConfirmIn = found.Pending, found.ConfirmIn
	}
	writeJSON(w, http.StatusOK, l)
}

func (s *Server) handleEndOrphans(w http.ResponseWriter, r *http.Request) {
	c, ok := s.caller(w, r)
	if !ok {
		return
	}
	var req EndOrphansRequest
	if !s.decode(w, r, &req, `{"include_likely":bool,"certain_only":bool,"dry_run":bool}`) {
		return
	}
	if req.IncludeLikely && req.CertainOnly {
		writeError(w, http.StatusBadRequest, "include_likely and certain_only contradict each other (certain only is the default)")
		return
	}
	if s.EndOrphans == nil {
		writeError(w, http.StatusNotImplemented, "this agent does not look for orphans")
		return
	}
	list, rep, err := s.EndOrphans(r.Context(), c.UID, c.Root(), req.IncludeLikely, req.DryRun)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	s.presentOrphans(c, false, list)
	for i := range rep.Records {
		rep.Records[i].Argv = redact.Argv(rep.Records[i].Argv)
	}
	writeJSON(w, http.StatusOK, EndOrphansResult{Orphans: list, Report: rep})
}

// Orphans lists the leaked servers the caller may see.
func (c *Client) Orphans(ctx context.Context) (OrphanList, error) {
	var out OrphanList
	return out, c.get(ctx, "/v1/orphans", &out)
}

// EndOrphans ends them (see EndOrphansRequest).
func (c *Client) EndOrphans(ctx context.Context, req EndOrphansRequest) (EndOrphansResult, error) {
	var out EndOrphansResult
	return out, c.do(ctx, http.MethodPost, "/v1/orphans/end", req, &out)
}
