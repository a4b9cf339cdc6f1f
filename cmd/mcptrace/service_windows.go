package main

import (
	"context"
	"fmt"
	"log/slog"

	"golang.org/x/sys/windows/svc"

	"github.com/mcptrace/mcptrace/agent"
)

// ServiceName is the Windows service the agent runs as (mcptrace service
// install).
const ServiceName = "mcptrace"

// runAgent runs a until ctx ends. Started by the service control manager,
// it runs as the service: Running once the agent serves on its pipe, and
// Stop or Shutdown end it (the agent then writes its final checkpoint).
// Started from a console, it runs in the foreground.
func runAgent(ctx context.Context, a *agent.Agent, log *slog.Logger) error {
	isService, err := svc.IsWindowsService()
	if err != nil {
		return fmt.Errorf("tell whether this runs as a service: %w", err)
	}
	if !isService {
		return a.Run(ctx)
	}
	h := &serviceHandler{ctx: ctx, a: a, log: log}
	if err := svc.Run(ServiceName, h); err != nil {
		return fmt.Errorf("run as the %s service: %w", ServiceName, err)
	}
	return h.err
}

// serviceHandler is the agent as the service control manager drives it.
type serviceHandler struct {
	ctx context.Context
	a   *agent.Agent
	log *slog.Logger
	err error // what the agent's Run returned
}

// Execute runs the agent and answers the service control manager until
// the agent stops; a failed agent exits with service-specific code 1,
// which the manager's recovery actions act on.
func (h *serviceHandler) Execute(_ []string, req <-chan svc.ChangeRequest, status chan<- svc.Status) (bool, uint32) {
	const accepts = svc.AcceptStop | svc.AcceptShutdown
	status <- svc.Status{State: svc.StartPending}
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.a.Run(ctx) }()
	ready := h.a.Ready()
	for {
		select {
		case <-ready:
			ready = nil
			status <- svc.Status{State: svc.Running, Accepts: accepts}
			h.log.Info("running as the service", "service", ServiceName)
		case c := <-req:
			switch c.Cmd {
			case svc.Interrogate:
				status <- c.CurrentStatus
			case svc.Stop, svc.Shutdown:
				status <- svc.Status{State: svc.StopPending}
				cancel()
			}
		case err := <-done:
			h.err = err
			if err != nil {
				h.log.Error("the agent stopped", "err", err)
				return true, 1
			}
			return false, 0
		}
	}
}
