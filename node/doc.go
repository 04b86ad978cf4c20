// Package node is the one place that composes a node. A node is three
// processes in the node's namespaces (see package netns):
//
//   - the node process: the fake cluster (package sim) and the fake API
//     server kube-proxy watches, churn, faults, the scenario's steps, the
//     rule readers; it records what happened into a reports.ModeResult;
//   - kube-proxy's process (kubeproxy.go): the upstream proxier wired as
//     cmd/kube-proxy wires it (package proxier), its informers and kpsim's
//     sync recorder, on the node's API through package remoteapi; so its
//     CPU time and memory are kube-proxy's alone, and it can be stopped
//     and started again while the pods and the prober go on;
//   - the dataplane process (netns.Dataplane): the fake pods and the
//     prober.
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
