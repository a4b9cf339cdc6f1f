package api

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
)

// The history's answers read the disk and decode records: a user who
// asks for them on every connection they may open could take the
// agent's CPU and memory from everyone (issue 31: 8 connections asking
// `tree PID --at` for 30 s took 185% CPU and root's median latency to
// 92 ms). So each non-root uid has at most historyPerUID such requests
// running at once, and all non-root users historyTotal; what is over is
// refused with 429 and counted. Root is not limited: its requests must
// get through, and root can stop the agent anyway. What one request
// reads is bounded where it is read (MaxHistoryLimit sessions for a
// list, one record for a session, maxPastTrees records for a tree,
// found through the history's pid index).
const (
	historyPerUID = 2
	historyTotal  = 8
)

// historyWork counts the history requests running, per uid.
type historyWork struct {
	mu      sync.Mutex
	total   int
	perUID  map[uint32]int
	refused atomic.Uint64
}

// take takes a slot for c's history request; when none is left it
// answers 429 and returns false. release gives the slot back.
func (h *historyWork) take(w http.ResponseWriter, c Caller) (release func(), ok bool) {
	if c.Root() {
		return func() {}, true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.perUID == nil {
		h.perUID = map[uint32]int{}
	}
	if h.perUID[c.UID] >= historyPerUID || h.total >= historyTotal {
		h.refused.Add(1)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("too many history requests at once (%d of yours, %d of all users may run): try again in a moment", historyPerUID, historyTotal))
		return nil, false
	}
	h.total++
	h.perUID[c.UID]++
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.total--
		if h.perUID[c.UID]--; h.perUID[c.UID] <= 0 {
			delete(h.perUID, c.UID)
		}
	}, true
}
