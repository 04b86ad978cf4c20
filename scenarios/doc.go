// Package scenarios defines the kpsim scenario file (apiVersion
// kpsim.dev/v1alpha1, kind Scenario) and loads it: strict YAML decoding
// with line numbers, the defaults documented on each type, and validation
// that reports every problem at once with its field path.
//
// It is the leaf of kpsim's packages: types and loading only. It must not
// create objects, touch the kernel or import any other kpsim package; the
// sim package turns a scenario into a fake cluster.
package scenarios
