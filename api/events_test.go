package api

import (
	"testing"

	"github.com/mcptrace/mcptrace/events"
)

// An event reaches a caller other than root only as the other answers
// would show what it is about: sessions it owns, and in them its own
// uid's processes, kills and containers; its own orphans; losses. A
// marker's sender only to the sender's uid.
func TestEventsAreNarrowedAsEveryOtherAnswer(t *testing.T) {
	u := events.U
	root, alice := Caller{UID: 0}, Caller{UID: 1000}
	for _, tc := range []struct {
		name  string
		e     events.Event
		alice bool
	}{
		{"her session's begin", events.Event{Kind: events.SessionBegin, Owner: u(1000), UID: u(1000)}, true},
		{"root's session's begin", events.Event{Kind: events.SessionBegin, Owner: u(0), UID: u(0)}, false},
		{"another user's session's end", events.Event{Kind: events.SessionEnd, Owner: u(1001), UID: u(1001)}, false},
		{"her exec in her session", events.Event{Kind: events.Exec, Owner: u(1000), UID: u(1000)}, true},
		{"a sudo'ed member's exec in her session", events.Event{Kind: events.Exec, Owner: u(1000), UID: u(0)}, false},
		{"her process's exec in root's session", events.Event{Kind: events.Exec, Owner: u(0), UID: u(1000)}, false},
		{"a kill of hers", events.Event{Kind: events.Kill, Owner: u(1000), UID: u(1000)}, true},
		{"a kill of another uid in her session", events.Event{Kind: events.Kill, Owner: u(1000), UID: u(1001)}, false},
		{"a container her client started", events.Event{Kind: events.ContainerStart, Owner: u(1000), UID: u(1000)}, true},
		{"a container root's client started in her session", events.Event{Kind: events.ContainerStart, Owner: u(1000), UID: u(0)}, false},
		{"her orphan", events.Event{Kind: events.OrphanFound, UID: u(1000)}, true},
		{"another user's orphan ended", events.Event{Kind: events.OrphanEnded, UID: u(1001)}, false},
		{"a loss", events.Event{Kind: events.Loss, What: "fork", Count: 1}, true},
		{"an event with no owner", events.Event{Kind: events.Exec}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !eventVisible(root, &tc.e) {
				t.Error("root does not see it")
			}
			if got := eventVisible(alice, &tc.e); got != tc.alice {
				t.Errorf("uid 1000 sees it: %v, want %v", got, tc.alice)
			}
		})
	}
	marker := func(sender uint32) events.Event {
		return events.Event{Kind: events.Marker, Owner: u(1000), PID: 42, StartNS: 7, UID: u(sender)}
	}
	own, other := marker(1000), marker(0)
	presentEvent(alice, &own)
	presentEvent(alice, &other)
	if own.PID != 42 || own.UID == nil {
		t.Errorf("her own marker's sender was hidden from her: %+v", own)
	}
	if other.PID != 0 || other.StartNS != 0 || other.UID != nil {
		t.Errorf("root's marker in her session shows its sender: %+v", other)
	}
	other = marker(0)
	presentEvent(root, &other)
	if other.PID != 42 {
		t.Errorf("root does not see a marker's sender: %+v", other)
	}
}
