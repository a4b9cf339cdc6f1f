package agent

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/exporter"
)

// metricsEndpoint is the agent's /metrics listener. Anyone may bind a
// loopback port first: a metrics address that cannot be had never stops
// the agent, which enforces without it, says so once, counts every
// failed attempt (status: metrics.listen_failures_total) and tries again
// every metricsRetry until it serves.
type metricsEndpoint struct {
	mu       sync.Mutex
	addr     string // where /metrics is served; "" while it is not
	err      string // why the last attempt failed; "" once serving
	failures uint64
}

// metricsRetry is how long the agent waits to try the metrics address
// again after it could not be had.
const metricsRetry = 10 * time.Second

// listen makes one attempt at the metrics address.
func (a *Agent) listenMetrics() net.Listener {
	m := &a.metrics
	l, err := exporter.Listen(a.opts.MetricsAddress)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.failures++
		if m.failures == 1 {
			a.log.Error("metrics address taken or unusable: the agent enforces without /metrics and tries again",
				"address", a.opts.MetricsAddress, "retry_every", a.metricsRetry(), "err", err)
		}
		m.err = err.Error()
		return nil
	}
	m.addr, m.err = l.Addr().String(), ""
	return l
}

func (a *Agent) metricsRetry() time.Duration {
	if a.opts.MetricsRetry > 0 {
		return a.opts.MetricsRetry
	}
	return metricsRetry
}

// serveMetrics serves /metrics on l (or, when l is nil, on the address
// once it can be had) until ctx ends. A listener that fails is given up
// and the address tried again: the metrics never stop the agent.
func (a *Agent) serveMetrics(ctx context.Context, l net.Listener) {
	// One Peers for every listener in turn: what a peer holds and what
	// was refused go on across them.
	peers := exporter.NewPeers()
	reg := exporter.NewRegistry(func() (exporter.Picture, exporter.Health) {
		pic := a.Picture()
		if a.opts.HideServerNames {
			pic = exporter.WithoutServerNames(pic)
		}
		return pic, a.Health()
	}, peers)
	h := exporter.WithProbes(exporter.Handler(reg, a.opts.Logger.With("component", "exporter")), a.probes())
	for ctx.Err() == nil {
		if l == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(a.metricsRetry()):
			}
			if l = a.listenMetrics(); l == nil {
				continue
			}
		}
		a.log.Info("serving metrics", "address", l.Addr().String(), "path", "/metrics", "sample_interval", a.opts.SampleInterval,
			"failed_attempts_before", a.metrics.failed())
		err := exporter.Serve(ctx, l, h, peers)
		l.Close()
		l = nil
		a.metrics.mu.Lock()
		a.metrics.addr = ""
		if err != nil {
			a.metrics.failures++
			a.metrics.err = err.Error()
		}
		a.metrics.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			a.log.Error("metrics listener failed; trying the address again", "err", err)
		}
	}
}

func (m *metricsEndpoint) failed() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failures
}

// status is the endpoint as `mcptrace status` shows it.
func (m *metricsEndpoint) status() (addr, err string, failures uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addr, m.err, m.failures
}

// MetricsAddress is where /metrics is served now: once Ready is closed,
// if the address could be had at start ("" when the agent serves no
// metrics, or not yet).
func (a *Agent) MetricsAddress() string {
	addr, _, _ := a.metrics.status()
	return addr
}

// metricsStatus fills what status says of the endpoint.
func (a *Agent) metricsStatus(st *api.MetricsStatus) {
	st.Address, st.ListenError, st.ListenFailures = a.metrics.status()
	if a.opts.MetricsAddress != "" && st.Address == "" && st.ListenError == "" {
		st.ListenError = "not listening yet"
	}
}
