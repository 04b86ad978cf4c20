package scenarios

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	kjson "sigs.k8s.io/json"
)

// UnmarshalYAML decodes one literal manifest strictly, the way the API
// server would: case-sensitive field names, unknown and duplicate fields
// refused. Errors carry the line of the offending field.
func (o *Object) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return typeError(n, "must be a Service or EndpointSlice manifest, not %s", describe(n))
	}
	o.Line = n.Line
	var generic map[string]any
	if err := n.Decode(&generic); err != nil {
		return typeError(n, "manifest: %v", err)
	}
	apiVersion, _ := generic["apiVersion"].(string)
	kind, _ := generic["kind"].(string)
	var target any
	switch {
	case apiVersion == "v1" && kind == "Service":
		o.Service = &corev1.Service{}
		target = o.Service
	case apiVersion == "discovery.k8s.io/v1" && kind == "EndpointSlice":
		o.EndpointSlice = &discoveryv1.EndpointSlice{}
		target = o.EndpointSlice
	default:
		return typeError(n, "manifest must be apiVersion v1, kind Service or apiVersion discovery.k8s.io/v1, kind EndpointSlice; got apiVersion %q, kind %q", apiVersion, kind)
	}
	data, err := json.Marshal(generic)
	if err != nil {
		return typeError(n, "manifest %s: %v", kind, err)
	}
	strictErrs, err := kjson.UnmarshalStrict(data, target)
	if err != nil {
		return typeError(n, "%s manifest: %v", kind, err)
	}
	if len(strictErrs) > 0 {
		var msgs []string
		for _, e := range strictErrs {
			line := n.Line
			if f, ok := strictField(e); ok {
				if l := lineOfPath(n, f); l > 0 {
					line = l
				}
			}
			msgs = append(msgs, fmt.Sprintf("line %d: %s manifest: %v", line, kind, e))
		}
		return &yaml.TypeError{Errors: msgs}
	}
	return nil
}

// MarshalJSON writes the manifest itself, so a scenario echoed into a
// result reads like the file.
func (o Object) MarshalJSON() ([]byte, error) {
	if o.Service != nil {
		return json.Marshal(o.Service)
	}
	return json.Marshal(o.EndpointSlice)
}

// strictField extracts the field path from a sigs.k8s.io/json strict error
// (`unknown field "spec.ports[0].nme"`).
func strictField(err error) (string, bool) {
	msg := err.Error()
	i := strings.Index(msg, `"`)
	j := strings.LastIndex(msg, `"`)
	if i < 0 || j <= i {
		return "", false
	}
	return msg[i+1 : j], true
}

// lineOfPath finds the line of a dotted field path ("spec.ports[0].name")
// under a mapping node, or 0 when the path is not there.
func lineOfPath(n *yaml.Node, path string) int {
	line := 0
	for _, part := range splitPath(path) {
		switch {
		case part.index >= 0:
			if n.Kind != yaml.SequenceNode || part.index >= len(n.Content) {
				return line
			}
			n = n.Content[part.index]
			line = n.Line
		default:
			if n.Kind != yaml.MappingNode {
				return line
			}
			found := false
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == part.name {
					line = n.Content[i].Line
					n = n.Content[i+1]
					found = true
					break
				}
			}
			if !found {
				return line
			}
		}
	}
	return line
}

type pathPart struct {
	name  string
	index int // -1 for a field name
}

// splitPath splits "a.b[2].c" into a, b, [2], c.
func splitPath(path string) []pathPart {
	var parts []pathPart
	for _, seg := range strings.Split(path, ".") {
		for seg != "" {
			i := strings.IndexByte(seg, '[')
			if i < 0 {
				parts = append(parts, pathPart{name: seg, index: -1})
				break
			}
			if i > 0 {
				parts = append(parts, pathPart{name: seg[:i], index: -1})
			}
			j := strings.IndexByte(seg[i:], ']')
			if j < 0 {
				break
			}
			idx, err := strconv.Atoi(seg[i+1 : i+j])
			if err != nil {
				break
			}
			parts = append(parts, pathPart{index: idx})
			seg = seg[i+j+1:]
		}
	}
	return parts
}
