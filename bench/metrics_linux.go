package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/mcptrace/mcptrace/api"
)

// metricsHostArg0 names the bench's session roots ($0 of their bash) so a
// host rule of the bench's own configuration matches them, from /proc
// too: every agent of the section finds the same sessions at start.
const metricsHostArg0 = "mcpbench-host"

// metrics measures what metrics cost with 1,000 sessions of 10 live
// processes each: the latency of GET /metrics and the duration of a
// sample, and, in interleaved rounds of an agent sampling every second
// and one serving no metrics, an exec storm's rate and the events the
// agent lost (whether sampling slows event consumption).
func (b *bench) metrics(ctx context.Context) error {
	nSessions, perSession, scrapes := 1000, 10, 30
	if b.quick {
		nSessions, scrapes = 100, 10
	}
	res := &metricsResults{sessions: nSessions, processes: nSessions * perSession, rates: map[string][]float64{}, lost: map[string]uint64{}}
	b.res.metrics = res
	cfg := filepath.Join(b.tmp, "metrics-bench.yaml")
	rule := fmt.Sprintf("sessions:\n  rules:\n    - name: benchhost\n      argv: ['^bash -c .* %s [0-9]+$']\n", metricsHostArg0)
	if err := os.WriteFile(cfg, []byte(rule), 0o644); err != nil {
		return err
	}
	b.progress("starting %d sessions of %d processes", nSessions, perSession)
	hosts, err := startHosts(ctx, nSessions, perSession-1)
	defer func() {
		for _, h := range hosts {
			h.stop()
		}
	}()
	if err != nil {
		return err
	}
	for round := 0; round < b.rounds; round++ {
		order := []string{variantSampling, variantNoMetrics}
		if round%2 == 1 {
			order = []string{variantNoMetrics, variantSampling}
		}
		for _, v := range order {
			if err := b.metricsRound(ctx, res, v, cfg, scrapes); err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, v, err)
			}
		}
	}
	return nil
}

// startHosts starts n session roots of perHost sleepers each, 16 at a
// time.
func startHosts(ctx context.Context, n, perHost int) ([]*sleepers, error) {
	var (
		mu    sync.Mutex
		hosts []*sleepers
		first error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, 16)
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s, err := startSleepers(ctx, perHost, exec.Command("bash", "-c", sleepersScript, metricsHostArg0, strconv.Itoa(perHost)))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				first = cmpErr(first, err)
				return
			}
			hosts = append(hosts, s)
		}()
	}
	wg.Wait()
	return hosts, first
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

var sampleDuration = regexp.MustCompile(`(?m)^mcptrace_exporter_sample_duration_seconds ([0-9.e+-]+)$`)

// metricsRound starts one agent of variant v, waits until it tracks every
// session, scrapes it (sampling variant) and runs one exec storm.
func (b *bench) metricsRound(ctx context.Context, res *metricsResults, v, cfg string, scrapes int) error {
	addr := ""
	if v == variantSampling {
		addr = "127.0.0.1:0"
	}
	a, err := b.startAgent(ctx, b.agentDirs(), "--config", cfg, "--log.level", "info",
		"--metrics.listen-address", addr, "--metrics.sample-interval", "1s")
	if err != nil {
		return err
	}
	defer a.close()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		st, err := a.status(ctx)
		if err != nil {
			return err
		}
		if st.Sessions.Active >= res.sessions {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d sessions active after 5 minutes", st.Sessions.Active, res.sessions)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v == variantSampling {
		m := regexp.MustCompile(`msg="serving metrics" .*address=(\S+)`).FindStringSubmatch(a.logLine("serving metrics"))
		if m == nil {
			return fmt.Errorf("the agent logged no metrics address: %s", tail(a.log, 5))
		}
		time.Sleep(2 * time.Second) // a sample of the whole population
		for range scrapes {
			start := time.Now()
			resp, err := http.Get("http://" + m[1] + "/metrics")
			if err != nil {
				return err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET /metrics: %s %v", resp.Status, err)
			}
			res.scrapeMS = append(res.scrapeMS, float64(time.Since(start))/float64(time.Millisecond))
			res.bytes = len(body)
			if d := sampleDuration.FindSubmatch(body); d != nil {
				res.sampleMS = append(res.sampleMS, atof(string(d[1]))*1000)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	st0, err := a.settled(ctx, api.Status{}, 0, 10*time.Second)
	if err != nil {
		return err
	}
	r, err := b.tools.storm(ctx, 'e', b.stormSecs, 0, -1, 2)
	if err != nil {
		return err
	}
	st1, err := a.settled(ctx, st0, uint64(3*r.children), 2*time.Minute)
	if err != nil {
		return err
	}
	res.rates[v] = append(res.rates[v], r.rate())
	res.lost[v] += sum(st1.Lost) - sum(st0.Lost)
	b.progress("%s: exec storm %.0f/s, lost %d", v, r.rate(), sum(st1.Lost)-sum(st0.Lost))
	return nil
}
