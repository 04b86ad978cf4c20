// Command kpsim runs the production kube-proxy proxiers against a fake
// API server inside throwaway network namespaces and reports how they
// scale. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kpsim/kpsim/netns"
	"github.com/kpsim/kpsim/orchestrator"
)

// Exit codes, documented in --help.
const (
	exitOK          = 0
	exitExpectation = 1 // a scenario's expectations were not met
	exitBadInput    = 2 // bad scenario, flags or usage
	exitEnvironment = 3 // the machine lacks something the run needs
)

// exitError carries an exit code to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func badInput(err error) error    { return &exitError{exitBadInput, err} }
func environment(err error) error { return &exitError{exitEnvironment, err} }

func main() {
	// A node process is this binary re-executed into its own namespaces
	// (see package netns); it runs its node main and exits inside Init.
	if netns.Init() {
		return
	}
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	root := newRootCommand()
	root.SetArgs(args)
	err := root.Execute()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kpsim:", err)
	}
	return exitCode(err)
}

// exitCode maps an error to kpsim's exit code.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	switch orchestrator.KindOf(err) {
	case orchestrator.Missed:
		return exitExpectation
	case orchestrator.BadInput:
		return exitBadInput
	case orchestrator.Environment:
		return exitEnvironment
	}
	// cobra's own errors are about usage: unknown command or flag.
	return exitBadInput
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "kpsim",
		Short: "Scale-test the production kube-proxy proxiers in throwaway network namespaces",
		Long: `kpsim runs the kube-proxy proxiers (iptables, nftables and IPVS modes,
imported unmodified from k8s.io/kubernetes) against a fake API server inside
throwaway network namespaces, and measures sync time, rule counts, network
programming latency and how traffic is spread.

Exit codes: 0 ok, 1 a scenario's expectations were not met, 2 bad input or
usage, 3 the machine lacks something (the message says what and how to get it).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newValidateCommand(),
		newRunCommand(),
		newReportCommand(),
		newCompareCommand(),
		newModesCommand(),
		newCleanupCommand(),
		newVersionCommand(),
	)
	return root
}

// interruptible returns a context cancelled by the first SIGINT or
// SIGTERM: the run then winds down (kills its nodes, writes what it
// measured, exits 1 saying it was interrupted). The first signal also
// removes the handler, so a second one ends kpsim at once; its nodes die
// with it (Pdeathsig) and leave nothing on the host. stop releases the
// handler.
func interruptible(parent context.Context, stderr io.Writer) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			signal.Stop(sigs)
			fmt.Fprintf(stderr, "kpsim: %v: stopping the nodes and writing what was measured (again to quit at once)\n", s)
			cancel()
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}
