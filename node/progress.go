package node

import "time"

// progressEvery is how often a node emits EventProgress at most.
const progressEvery = 2 * time.Second

// emitProgress sends a progress event if the last one is progressEvery
// old (or force).
func (n *node) emitProgress(p ProgressEvent, force bool) {
	if !force && time.Since(n.lastProgress) < progressEvery {
		return
	}
	n.lastProgress = time.Now()
	_ = n.env.Emit(EventProgress, p)
}
