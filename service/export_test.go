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
