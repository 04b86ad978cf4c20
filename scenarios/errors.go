package scenarios

import (
	"fmt"
	"sort"
	"strings"
)

// Error is one problem in a scenario file, located by line and field path
// so a user can go straight to it.
type Error struct {
	// File is the scenario file's path.
	File string
	// Line is the 1-based line of the offending field, or 0 when the
	// problem has no single place (for example a missing required field
	// of the whole file).
	Line int
	// Field is the field path, such as spec.serviceGroups[0].count.
	Field string
	// Detail says what is wrong and, where it helps, what would be right.
	Detail string
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", loc, e.Field, e.Detail)
	}
	return fmt.Sprintf("%s: %s", loc, e.Detail)
}

// ErrorList is every problem found in one file, in line order. The loader
// reports all of them at once instead of making the user fix one per run.
type ErrorList []*Error

func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

func (l ErrorList) sort() {
	sort.SliceStable(l, func(i, j int) bool {
		if l[i].Line != l[j].Line {
			return l[i].Line < l[j].Line
		}
		return l[i].Field < l[j].Field
	})
}
