package sim

import (
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kpsim/kpsim/scenarios"
)

// APIFault is an armed scenarios.APIFault: reactors at the front of the
// fake clientset's chains that fail or delay matching calls, and what they
// did. The fake runs its reactors under its own lock, so a delayed call
// holds back every other call (as one slow API server would).
type APIFault struct {
	spec scenarios.APIFault

	mu      sync.Mutex
	errors  int // injected so far
	delayed int
	byVerb  map[string]int
}

// APIFaultCount says what an armed API fault did.
type APIFaultCount struct {
	// Errors is how many calls failed with an injected server error.
	Errors int `json:"errors"`
	// Delayed is how many calls were held for the fault's delay.
	Delayed int `json:"delayed"`
	// ByVerb counts the faulted calls (failed or delayed) per verb.
	ByVerb map[string]int `json:"byVerb,omitempty"`
}

// InjectAPIFault arms f on the cluster's clientset, in front of every
// reactor, from now on.
func (c *Cluster) InjectAPIFault(f scenarios.APIFault) (*APIFault, error) {
	if f.Errors < 0 || f.Delayed < 0 || f.Delay.Duration < 0 || (f.Errors == 0 && f.Delay.Duration == 0) {
		return nil, fmt.Errorf("api fault on %s: need errors > 0 or a positive delay", f.Resource)
	}
	a := &APIFault{spec: f, byVerb: map[string]int{}}
	verbs := f.Verbs
	if len(verbs) == 0 {
		verbs = []string{"*"}
	}
	for _, v := range verbs {
		if v == "watch" || v == "*" {
			c.Clientset.PrependWatchReactor(f.Resource, func(action k8stesting.Action) (bool, watch.Interface, error) {
				handled, err := a.react(action)
				return handled, nil, err
			})
		}
		if v != "watch" {
			c.Clientset.PrependReactor(v, f.Resource, func(action k8stesting.Action) (bool, runtime.Object, error) {
				handled, err := a.react(action)
				return handled, nil, err
			})
		}
	}
	return a, nil
}

// react fails the call (handled, with an error) while errors are left,
// else delays it while delays are left and lets the chain go on.
func (a *APIFault) react(action k8stesting.Action) (bool, error) {
	a.mu.Lock()
	if a.errors < a.spec.Errors {
		a.errors++
		a.byVerb[action.GetVerb()]++
		a.mu.Unlock()
		gr := action.GetResource().GroupResource()
		return true, apierrors.NewInternalError(errors.New("kpsim: injected API fault on " + action.GetVerb() + " " + gr.String()))
	}
	d := a.spec.Delay.Duration
	if d <= 0 || (a.spec.Delayed > 0 && a.delayed >= a.spec.Delayed) {
		a.mu.Unlock()
		return false, nil
	}
	a.delayed++
	a.byVerb[action.GetVerb()]++
	a.mu.Unlock()
	time.Sleep(d)
	return false, nil
}

// Count returns what the fault did so far.
func (a *APIFault) Count() APIFaultCount {
	a.mu.Lock()
	defer a.mu.Unlock()
	by := make(map[string]int, len(a.byVerb))
	for k, v := range a.byVerb {
		by[k] = v
	}
	return APIFaultCount{Errors: a.errors, Delayed: a.delayed, ByVerb: by}
}
