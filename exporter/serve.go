package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"

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
// src and the Go runtime and process collectors.
func NewRegistry(src Source) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(src), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves reg's metrics; an error in a collector fails the scrape
// (HTTP 500) rather than serving half an answer.
func Handler(reg *prometheus.Registry, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelError),
		ErrorHandling:       promhttp.HTTPErrorOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "mcptrace agent: metrics at /metrics")
	})
	return mux
}

// MaxConnections bounds the connections /metrics serves at once; further
// ones wait in the kernel's backlog. Anyone who reaches the address may
// connect: each connection costs the agent a file descriptor, which the
// enforcer needs for pidfds, so their number stays small, and an idle one
// is closed after IdleTimeout.
const (
	MaxConnections = 8
	IdleTimeout    = 10 * time.Second
)

// Listen opens addr for Serve, at most MaxConnections served at once; the
// error says what to change when the address is taken.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s (set metrics.listen-address to another address, or \"\" to serve no metrics): %w", addr, err)
	}
	return netutil.LimitListener(l, MaxConnections), nil
}

// Serve serves h on l until ctx ends.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: IdleTimeout, MaxHeaderBytes: 16 << 10}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: serve: %w", err)
	}
	return nil
}
