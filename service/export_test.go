package service

// BatcherQueued returns how many requests wait in the batcher of the
// configuration in force, not yet handed to the store, or -1 when that
// configuration does not batch. Tests that hold a batch in flight use it
// to know when the other callers have queued behind it.
func BatcherQueued(s *Service) int {
	b := s.state.Load().batch
	if b == nil {
		return -1
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// Bound returns the store calls (batches, when batching) in flight under
// the bound of the configuration in force, and the requests queued for
// one; -1, -1 when that configuration has no bound.
func Bound(s *Service) (inflight, queued int) {
	st := s.state.Load()
	switch {
	case st.batch != nil:
		b := st.batch
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.inflight, b.queued
	case st.gate != nil:
		return len(st.gate.slots), int(st.gate.queued.Load())
	}
	return -1, -1
}
