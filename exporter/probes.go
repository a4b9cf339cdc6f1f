package exporter

import (
	"fmt"
	"net/http"
)

// The probes' paths on the metrics listener (the DaemonSet's probes ask
// them).
const (
	LivePath  = "/healthz"
	ReadyPath = "/readyz"
)

// Probes are the agent's health checks, served beside /metrics for the
// DaemonSet's probes and for load balancers and monitors that do not
// read Prometheus metrics.
type Probes struct {
	// Live is nil while the agent works (its loops answer); an error
	// says what is stuck: a restart is in order (/healthz).
	Live func() error
	// Ready is nil while the agent serves its API and enforces; an error
	// says why not yet or no longer (/readyz).
	Ready func() error
}

// WithProbes serves GET /healthz and /readyz from p, and everything else
// from h. A probe answers 200 "ok", or 503 with the reason: what is
// wrong with the agent, never what it tracks.
func WithProbes(h http.Handler, p Probes) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	probe := func(check func() error) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Cache-Control", "no-store")
			if check != nil {
				if err := check(); err != nil {
					w.WriteHeader(http.StatusServiceUnavailable)
					fmt.Fprintln(w, err)
					return
				}
			}
			fmt.Fprintln(w, "ok")
		}
	}
	mux.HandleFunc("GET "+LivePath, probe(p.Live))
	mux.HandleFunc("GET "+ReadyPath, probe(p.Ready))
	return mux
}
