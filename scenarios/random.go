package scenarios

import (
	"hash/fnv"
	"math/rand/v2"
)

// NewRNG returns the random stream of a scenario's seed for one purpose
// (for example "group", <name> for a service group's endpoint counts and
// placement). Each purpose has its own stream, so adding a group does not
// move the endpoints of another. The sim package draws every random
// choice from these streams, and Counts draws a group's endpoint counts
// from the same one, so both see the same numbers.
func NewRNG(seed int64, purpose ...string) *rand.Rand {
	h := fnv.New64a()
	for _, p := range purpose {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
}

// Draw returns a value of the range: Min when the range is fixed (nothing
// is drawn from rng), else one drawn uniformly from [Min, Max].
func (r IntRange) Draw(rng *rand.Rand) int {
	if r.Max <= r.Min {
		return r.Min
	}
	return r.Min + rng.IntN(r.Max-r.Min+1)
}
