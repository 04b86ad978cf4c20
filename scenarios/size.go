package scenarios

// Size is what a scenario's cluster can grow to: what a node's memory
// scales with. It is the part of Counts().Peak the memory estimate reads.
type Size struct {
	Services int
	// Endpoints is the endpoint addresses (each group at its largest
	// endpoints per Service, plus scale-ups, plus literal slices).
	Endpoints int64
	// EndpointSlices is the slices of the Services (100 endpoints each).
	EndpointSlices int64
}

// Size returns what the scenario can grow to (Counts().Peak, as the
// capacity check counts it).
func (s *Scenario) Size() Size {
	p := s.peak()
	return Size{Services: p.Services, Endpoints: p.Endpoints, EndpointSlices: p.EndpointSlices}
}
