package scenarios

import (
	"encoding/json"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as a Go duration string ("250ms",
// "1m30s") in scenario files and results.
type Duration struct {
	time.Duration
}

// D returns a pointer to a Duration, for literals in code and tests.
func D(d time.Duration) *Duration { return &Duration{d} }

// UnmarshalYAML accepts a duration string. A bare number is refused: "5"
// could mean seconds or nanoseconds, and a wrong guess would silently
// change a threshold a millionfold.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return typeError(n, "must be a duration such as 500ms, 2s or 1m30s, not %s", describe(n))
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return typeError(n, "must be a duration such as 500ms, 2s or 1m30s, not %q", n.Value)
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string: %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// UnmarshalYAML accepts a plain integer or a mapping {min: A, max: B}
// with both keys required.
func (r *IntRange) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		var v int
		if n.Tag != "!!int" || n.Decode(&v) != nil {
			return typeError(n, "must be an integer or {min: A, max: B}, not %s", describe(n))
		}
		r.Min, r.Max = v, v
		return nil
	case yaml.MappingNode:
		var errs []string
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			var dst *int
			switch k.Value {
			case "min":
				dst = &r.Min
			case "max":
				dst = &r.Max
			default:
				errs = append(errs, fmt.Sprintf("line %d: unknown field %q (want min and max)", k.Line, k.Value))
				continue
			}
			seen[k.Value] = true
			if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || v.Decode(dst) != nil {
				errs = append(errs, fmt.Sprintf("line %d: %s must be an integer, not %s", v.Line, k.Value, describe(v)))
			}
		}
		for _, k := range []string{"min", "max"} {
			if !seen[k] {
				errs = append(errs, fmt.Sprintf("line %d: %s is required in a range", n.Line, k))
			}
		}
		if len(errs) > 0 {
			return &yaml.TypeError{Errors: errs}
		}
		return nil
	}
	return typeError(n, "must be an integer or {min: A, max: B}, not %s", describe(n))
}

// MarshalJSON writes a fixed range as a number, like the file does.
func (r IntRange) MarshalJSON() ([]byte, error) {
	if r.Fixed() {
		return json.Marshal(r.Min)
	}
	return json.Marshal(struct {
		Min int `json:"min"`
		Max int `json:"max"`
	}{r.Min, r.Max})
}

// typeError reports a problem at a node the way yaml.v3 reports its own,
// so the decoder keeps collecting errors instead of stopping at the first.
func typeError(n *yaml.Node, format string, args ...any) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: ", n.Line) + fmt.Sprintf(format, args...)}}
}

// describe names what a node holds, for error messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.Tag {
	case "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case "!!null":
		return "null"
	}
	return n.Value
}
