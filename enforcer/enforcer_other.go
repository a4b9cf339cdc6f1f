//go:build !linux && !windows

package enforcer

import (
	"context"
	"log/slog"
	"time"
)

// Supported reports whether the enforcer can signal on this OS: it returns
// ErrUnsupported here.
func Supported() error { return ErrUnsupported }

type osState struct{}

func newOSState(log *slog.Logger) osState {
	log.Error("enforcer: " + ErrUnsupported.Error())
	return osState{}
}

// End signals nothing on this OS: every live member is recorded
// "failed: <ErrUnsupported>" and counted as a survivor.
func (e *Enforcer) End(ctx context.Context, en Ending) Report {
	start := time.Now()
	r := Report{Session: en.Session, Owner: en.Owner, Generation: en.Generation, Reason: en.Reason, Mode: e.cfg.Mode}
	if en.Members != nil {
		for _, p := range en.Members() {
			if p.Exited {
				continue
			}
			rec := newRecord(&en, p)
			rec.Result = ResultFailed + ": " + ErrUnsupported.Error()
			rec.At = time.Now()
			r.Records = append(r.Records, rec)
			r.Survivors++
		}
	}
	r.Empty = len(r.Records) == 0
	r.Duration = time.Since(start)
	e.finish(&r, 0, 0)
	return r
}
