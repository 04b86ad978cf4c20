package orchestrator

import (
	"errors"
	"fmt"

	"github.com/kpsim/kpsim/scenarios"
)

// Kind says what kind of failure an *Error is; the CLI maps it to an exit
// code.
type Kind int

const (
	// BadInput: a bad scenario, flag or argument.
	BadInput Kind = iota + 1
	// Environment: the machine lacks something the run needs.
	Environment
	// Missed: the run ended, but an expectation was missed, a mode failed
	// or the run was interrupted.
	Missed
)

// Error is a failure of a given Kind.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func badInput(err error) error    { return &Error{BadInput, err} }
func environment(err error) error { return &Error{Environment, err} }

// KindOf is err's Kind, 0 when it is no *Error.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

// LoadScenario loads one scenario, already read from path, for a command
// that runs it; a bad file is BadInput. The bytes validated are the bytes
// the nodes get.
func LoadScenario(path string, data []byte) (*scenarios.Scenario, error) {
	s, err := scenarios.Load(path, data)
	if err != nil {
		var list scenarios.ErrorList
		if errors.As(err, &list) {
			return nil, badInput(fmt.Errorf("invalid scenario:\n%w", err))
		}
		return nil, badInput(err)
	}
	return s, nil
}
