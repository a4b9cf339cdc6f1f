package sessions

import "github.com/mcptrace/mcptrace/internal/quota"

// Ended sessions kept per owner: no user's churn evicts another's.

// retain keeps s, just ended, among the retained ended sessions. An owner
// over Config.MaxEndedPerUID loses its own oldest; at Config.MaxEnded the
// owner holding the most loses its oldest: one user's churn never pushes
// out another user's sessions while it holds more than they do.
func (t *Tracker) retain(s *session) {
	t.ended = append(t.ended, s)
	t.endedPerUID[s.Owner]++
	for t.endedPerUID[s.Owner] > t.maxEndedPerUID {
		t.dropOldestOf(s.Owner)
	}
	for len(t.ended) > t.maxEnded {
		t.dropOldestOf(quota.LargestOwner(t.endedPerUID, func(n int) int { return n }))
	}
}

// dropOldestOf forgets the oldest retained ended session of owner.
func (t *Tracker) dropOldestOf(owner uint32) {
	for i, s := range t.ended {
		if s.Owner == owner {
			t.drop(i)
			t.st.droppedQuota++
			return
		}
	}
}
