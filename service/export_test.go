package service

// FarRTT is the round trip of a small batch from which the batcher takes
// its store for far.
const FarRTT = farRTT

// BatcherQueued returns how many requests wait in the batchers of the
// configuration in force (every node's), not yet handed to the store, or
// -1 when that configuration does not batch. Tests that hold a batch in
// flight use it to know when the other callers have queued behind it.
func BatcherQueued(s *Service) int {
	st := s.state.Load()
	if st.bounds == nil || !st.bound.batching {
		return -1
	}
	n := 0
	st.bounds.each(func(nb *nodeBound) {
		nb.batch.mu.Lock()
		n += len(nb.batch.queue)
		nb.batch.mu.Unlock()
	})
	return n
}

// Bound returns the decisions in flight (when batching; else the store
// calls) under the bound of the configuration in force, every node's
// together, and the requests queued for one; -1, -1 when that
// configuration has no bound.
func Bound(s *Service) (inflight, queued int) {
	st := s.state.Load()
	if st.bounds == nil {
		return -1, -1
	}
	st.bounds.each(func(nb *nodeBound) {
		if b := nb.batch; b != nil {
			b.mu.Lock()
			inflight += b.inflight
			queued += b.queued
			b.mu.Unlock()
			return
		}
		inflight += len(nb.gate.slots)
		queued += int(nb.gate.queued.Load())
	})
	return inflight, queued
}
