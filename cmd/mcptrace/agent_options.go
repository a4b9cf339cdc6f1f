//go:build linux || windows

package main

import (
	"log/slog"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/config"
)

// agentOptions is the one place a configuration becomes agent.Options.
// TestEveryConfigValueReachesTheAgent fails when a config value is added
// and not passed on here.
func agentOptions(cfg config.Config, log *slog.Logger) (agent.Options, error) {
	ec, err := cfg.EnforcerConfig()
	if err != nil {
		return agent.Options{}, err
	}
	return agent.Options{
		Socket:                  cfg.API.Socket,
		SocketMode:              cfg.API.SocketMode,
		APIMaxConnections:       cfg.API.MaxConnections,
		APIMaxConnectionsPerUID: cfg.API.MaxConnectionsPerUID,
		RingBufferSize:          cfg.BPF.RingBufferSize,
		TraceFS:                 cfg.BPF.TraceFS,
		BPFFS:                   cfg.BPF.BPFFS,
		PinDir:                  cfg.BPF.PinDir,
		StateDir:                cfg.State.Dir,
		CheckpointInterval:      cfg.State.CheckpointInterval,
		ProcRoot:                cfg.Lineage.ProcRoot,
		Retention:               cfg.Lineage.Retention,
		MaxNodes:                cfg.Lineage.MaxNodes,
		MaxImages:               cfg.Lineage.MaxImages,
		MaxImageBytes:           cfg.Lineage.MaxImageBytes,
		RepairInterval:          cfg.Lineage.RepairInterval,
		Sessions:                cfg.SessionsConfig(),
		Enforcer:                ec,
		MetricsAddress:          cfg.Metrics.ListenAddress,
		SampleInterval:          cfg.Metrics.SampleInterval,
		IdleAfter:               cfg.Metrics.IdleAfter,
		OrphansEvery:            cfg.Metrics.OrphansEvery,
		HideServerNames:         !cfg.Metrics.ServerNames,
		ReapSupersededAfter:     cfg.Enforcer.ReapSupersededAfter,
		Nice:                    &cfg.Enforcer.Nice,
		ContainerEngineSocket:   offAsDash(cfg.Containers.EngineSocket),
		HistoryDir:              offAsDash(cfg.History.Dir),
		HistoryMaxAge:           cfg.History.MaxAge,
		HistoryMaxBytes:         int64(cfg.History.MaxBytes),
		ExportFile:              cfg.Export.File,
		ExportMaxBytes:          int64(cfg.Export.MaxBytes),
		ExportMaxFiles:          cfg.Export.MaxFiles,
		Logger:                  log,
	}, nil
}

// offAsDash is an option that an empty value turns off
// (containers.engine-socket, history.dir) as agent.Options takes it:
// empty there means the default, "-" off.
func offAsDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
