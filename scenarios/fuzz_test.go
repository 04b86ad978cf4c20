package scenarios

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to the loader. It must never panic; it
// either returns a scenario that validates or an ErrorList whose every
// entry is located.
func FuzzLoad(f *testing.F) {
	seeds, _ := filepath.Glob("*.yaml")
	invalid, _ := filepath.Glob("testdata/invalid/*.yaml")
	for _, p := range append(seeds, invalid...) {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Load("fuzz.yaml", data)
		if err != nil {
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error is not a non-empty ErrorList: %T %v", err, err)
			}
			for _, e := range list {
				if e.Line == 0 && e.Field == "" {
					t.Fatalf("unlocated error: %v", e)
				}
			}
			return
		}
		if err := Validate(s); err != nil {
			t.Fatalf("loaded scenario fails validation again: %v", err)
		}
	})
}
