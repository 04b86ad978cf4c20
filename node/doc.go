// Package node is the one place that composes a node: inside a node
// process (see package netns) it builds the fake cluster (package sim),
// starts kube-proxy (package proxier) against it, creates the fake pods
// and the prober, runs the scenario's steps and records what happened
// into a reports.ModeResult.
//
// It also holds, as pure functions tested without root, the model every
// probe verdict rests on: which endpoints a connection may reach under
// kube-proxy's semantics ([Expect]), how a probe's replies are checked
// against it ([Tally], [CheckProbe]) and how many connections a probe
// step makes ([PlanConnections]); and the typed messages between a node
// and the orchestrator ([Input], [StepEvent], [ProgressEvent], [Result]).
//
// What it must not do: run anything on the host (it is only ever entered
// through netns.Init in a process that owns its namespaces); decide where
// or in which order modes run, or render reports (package orchestrator
// and the CLI do); import package orchestrator or cmd.
package node
