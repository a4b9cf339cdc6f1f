//go:build !windows

package sensor

// ETWSource stands in for Windows' ETW session (Options.ETW); it has no
// use on this system.
type ETWSource interface{}
