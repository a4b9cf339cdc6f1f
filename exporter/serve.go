package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultListenAddress is where the agent serves /metrics by default
// (metrics.listen-address): loopback only.
const DefaultListenAddress = "127.0.0.1:9467"

// Defaults of the sampling the agent does for the metrics
// (metrics.sample-interval, metrics.idle-after).
const (
	DefaultSampleInterval = 15 * time.Second
	DefaultIdleAfter      = 30 * time.Minute
	// DefaultOrphansEvery is how often a sample looks for leaked servers
	// no session owns (mcptrace orphans): a look reads /proc for every
	// unowned wrapper and server, and every process's descriptors when
	// one of them reads a pipe.
	DefaultOrphansEvery = time.Minute
)

// NewRegistry returns a private registry with the mcptrace collector over
// src, the Go runtime and process collectors, and extra (the endpoint's
// Peers, which count what they refuse).
func NewRegistry(src Source, extra ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(src), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(extra...)
	return reg
}

// Handler serves reg's metrics; an error in a collector fails the scrape
// (HTTP 500) rather than serving half an answer.
func Handler(reg *prometheus.Registry, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelError),
		ErrorHandling: promhttp.HTTPErrorOnError,
		// Per peer the bound is MaxInFlightPerPeer (peers.go); this one is
		// the total, which only root and unknown peers may fill.
		MaxRequestsInFlight: MaxConnections,
		Timeout:             10 * time.Second,
	}))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "mcptrace agent: metrics at /metrics")
	})
	return mux
}

// Listen opens addr for Serve; the error says what to change when the
// address is taken.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s (set metrics.listen-address to another address, or \"\" to serve no metrics): %w", addr, err)
	}
	return l, nil
}

// Serve serves h on l until ctx ends, admitting connections by peer
// (peers.go): no one local user can hold the connections or the /metrics
// requests a scrape needs.
func Serve(ctx context.Context, l net.Listener, h http.Handler, p *Peers) error {
	srv := &http.Server{Handler: p.oneAtATime(h), ConnContext: connContext,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: IdleTimeout, MaxHeaderBytes: 16 << 10}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(listener{Listener: l, p: p}); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: serve: %w", err)
	}
	return nil
}
