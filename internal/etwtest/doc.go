// Package etwtest stands in for the kernel's ETW session in the tests
// that run under wine, whose ETW delivers no events: a Session hands its
// consumer (sensor.Options.ETW, agent.Options.ETW) the Handler a test
// then calls with the values of real processes' starts and stops, as
// ProcessTrace's callback would.
//
// It is for tests only, and Windows only.
package etwtest
