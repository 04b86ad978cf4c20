package scenarios

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// SweepPoint returns the scenario file data with the sweep group's count
// set to count, and that scenario loaded. Each point of a sweep is this
// document: the node that runs it receives these bytes, so what it
// builds is exactly what the document says, and the point can be rerun
// alone from the file kpsim saves.
//
// The edit is made on the YAML node tree, so everything else in the file
// (literal manifests, comments, key order) is kept as written; spec.sweep
// stays, so the point validates against the same capacity as the sweep.
func SweepPoint(file string, data []byte, count int) ([]byte, *Scenario, error) {
	s, err := Load(file, data)
	if err != nil {
		return nil, nil, err
	}
	if s.Spec.Sweep == nil {
		return nil, nil, fmt.Errorf("%s: the scenario has no spec.sweep", file)
	}
	if count < 1 {
		return nil, nil, fmt.Errorf("%s: sweep count %d: must be positive", file, count)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	g, err := groupNode(&doc, s.Spec.Sweep.Group)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	setScalar(g, "count", strconv.Itoa(count))

	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, nil, fmt.Errorf("%s: encoding the sweep point: %w", file, err)
	}
	if err := enc.Close(); err != nil {
		return nil, nil, fmt.Errorf("%s: encoding the sweep point: %w", file, err)
	}
	out := buf.Bytes()
	ps, err := Load(file, out)
	if err != nil {
		return nil, nil, fmt.Errorf("the scenario at sweep count %d: %w", count, err)
	}
	for _, pg := range ps.Spec.ServiceGroups {
		if pg.Name == s.Spec.Sweep.Group && pg.Count != count {
			return nil, nil, fmt.Errorf("%s: group %s has count %d after resizing to %d", file, pg.Name, pg.Count, count)
		}
	}
	return out, ps, nil
}

// groupNode finds spec.serviceGroups[name == group] in a decoded document.
func groupNode(doc *yaml.Node, group string) (*yaml.Node, error) {
	root := doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	spec := mapValue(root, "spec")
	groups := mapValue(spec, "serviceGroups")
	if groups == nil || groups.Kind != yaml.SequenceNode {
		return nil, errors.New("spec.serviceGroups is not a list")
	}
	for _, g := range groups.Content {
		if n := mapValue(g, "name"); n != nil && n.Value == group {
			return g, nil
		}
	}
	return nil, fmt.Errorf("spec.serviceGroups has no group %q", group)
}

// mapValue returns the value of key in mapping m, or nil.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil {
		return nil
	}
	if m.Kind == yaml.AliasNode {
		m = m.Alias
	}
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// setScalar sets key in mapping m to an integer scalar, adding the key
// when it is missing.
func setScalar(m *yaml.Node, key, value string) {
	if v := mapValue(m, key); v != nil {
		*v = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: value, Style: v.Style &^ (yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle)}
		return
	}
	m.Content = append(m.Content,
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key},
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: value})
}
