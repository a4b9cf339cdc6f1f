// Package sensor is the Linux kernel side of the data path: it loads and
// attaches the programs of package bpf, reads their ring buffer and decodes
// each record into a platform-neutral lineage.Event.
//
// A Sensor is owned by one goroutine that calls Read; Lost, Recovered and
// Close may be called from any goroutine. Errors from Open name the kernel
// feature or the privilege that is missing (see FeatureError).
//
// The sensor does not know about graphs, sessions or metrics: it turns
// kernel records into events and counts what the kernel could not send.
package sensor
