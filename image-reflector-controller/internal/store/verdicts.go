package store

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"time"

	"toolkit.dev/image-toolkit/pkg/signature"
)

// Verdicts caches signature verdicts by key set (signature.Config.ID)
// and digest, in one file beside the tag files (verdicts.json, replaced
// atomically), so that a digest is verified once across policies,
// rescans and restarts. A verdict is about content-addressed things, so a
// verified one holds for good; an unverified one holds until the caller
// decides to look again (a signature may be attached later), by its
// Checked time. A file that does not parse is dropped: the cost is
// verifying again, never trusting what was not verified.
type Verdicts struct {
	path string
	mu   sync.Mutex
	m    map[string]Verdict
}

// Verdict is a cached verdict and when it was reached.
type Verdict struct {
	signature.Verdict
	KeySet  string    `json:"keySet"`
	Checked time.Time `json:"checked"`
}

// MaxVerdicts bounds the cache; the oldest verdicts go first.
const MaxVerdicts = 100000

const verdictsFile = "verdicts.json"

func openVerdicts(dir string) *Verdicts {
	v := &Verdicts{path: filepath.Join(dir, verdictsFile), m: map[string]Verdict{}}
	b, err := os.ReadFile(v.path)
	if err != nil {
		return v
	}
	var list []Verdict
	if json.Unmarshal(b, &list) != nil {
		return v
	}
	for _, e := range list {
		if e.KeySet != "" && e.Digest != "" {
			v.m[verdictKey(e.KeySet, e.Digest)] = e
		}
	}
	return v
}

func verdictKey(keySet, digest string) string { return keySet + "\x00" + digest }

// Get returns the verdict of digest under keySet.
func (v *Verdicts) Get(keySet, digest string) (Verdict, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.m[verdictKey(keySet, digest)]
	return e, ok
}

// Len is the number of verdicts cached.
func (v *Verdicts) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.m)
}

// Put records a verdict under keySet and writes the cache.
func (v *Verdicts) Put(keySet string, verdict signature.Verdict, checked time.Time) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.m[verdictKey(keySet, verdict.Digest)] = Verdict{Verdict: verdict, KeySet: keySet, Checked: checked.UTC()}
	if len(v.m) > MaxVerdicts {
		var oldest string
		var at time.Time
		for k, e := range v.m {
			if oldest == "" || e.Checked.Before(at) {
				oldest, at = k, e.Checked
			}
		}
		delete(v.m, oldest)
	}
	list := make([]Verdict, 0, len(v.m))
	for _, e := range v.m {
		list = append(list, e)
	}
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(list); err != nil {
		return err
	}
	return writeFile(filepath.Dir(v.path), v.path, b.Bytes())
}
