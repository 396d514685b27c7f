package serve

import (
	"container/list"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stamp-dev/stamp/layers/cache"
)

// States of a build.
const (
	stateQueued  = "queued"
	stateRunning = "running"
	stateDone    = "done"
	stateFailed  = "failed"
	// statePruned is a finished build whose files the cache no longer
	// holds (a prune took them); POSTing it again builds it again.
	statePruned = "pruned"
)

// Status is what GET /v1/builds/ID answers, and, with the token's name,
// what the state directory keeps of a build.
type Status struct {
	ID     string            `json:"id"`
	Recipe string            `json:"recipe"`
	Params map[string]string `json:"params,omitempty"`
	State  string            `json:"state"`
	// Phase is what the build is doing: prepare (planning, resolving
	// inputs, looking in the cache), base, customize, provision, outputs.
	Phase string `json:"phase,omitempty"`
	// Phases are the phases that ran; none when the cache held the tree.
	Phases   []string     `json:"phases,omitempty"`
	Progress *Progress    `json:"progress,omitempty"`
	Error    *APIError    `json:"error,omitempty"`
	Outputs  []OutputFile `json:"outputs,omitempty"`
	Created  time.Time    `json:"created"`
	Started  *time.Time   `json:"started,omitempty"`
	Finished *time.Time   `json:"finished,omitempty"`
	Attempts int          `json:"attempts"`
	// Log and URL are where the build's log and this status are.
	Log string `json:"log,omitempty"`
	URL string `json:"url,omitempty"`
}

// Progress is the long step a running build is in, in bytes.
type Progress struct {
	Step  string `json:"step"`
	Done  int64  `json:"done"`
	Total int64  `json:"total,omitempty"`
}

// OutputFile is one file a finished build made: an output (or a file
// inside an output that is a directory), SHA256SUMS, manifest.txt,
// provenance.json or the SBOM.
type OutputFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	URL    string `json:"url"`
}

// APIError is an error answer, naming the recipe field or request field
// at fault when there is one.
type APIError struct {
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

// saved is a build as the state directory keeps it.
type saved struct {
	Status
	Token string            `json:"token,omitempty"`
	Asked map[string]string `json:"asked,omitempty"`
}

// build is one build the server knows, running or not.
type build struct {
	id    string
	token string
	// req is the request as loaded: the recipe and the parts of its ID.
	// After a restart it is nil until the build runs again.
	req *loaded

	// asked are the parameters as the request gave them.
	asked map[string]string

	saveMu  sync.Mutex // orders the saves of the build's state
	mu      sync.Mutex
	st      Status
	version uint64        // counts every change, progress included
	notify  chan struct{} // closed when the state or phase changes
	touched time.Time     // when the cache was last told the build was used
	elem    *list.Element // its place among the finished builds
}

func newBuild(st Status, token string) *build {
	return &build{id: st.ID, token: token, st: st, notify: make(chan struct{})}
}

// snapshot is a copy of the build's status to answer with, and what to
// wait on for the next change.
func (b *build) snapshot() (Status, uint64, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.st
	st.Params = cloneMap(b.st.Params)
	st.Phases = slices.Clone(b.st.Phases)
	st.Outputs = slices.Clone(b.st.Outputs)
	if b.st.Progress != nil {
		p := *b.st.Progress
		st.Progress = &p
	}
	st.Log = "/v1/builds/" + b.id + "/log"
	st.URL = "/v1/builds/" + b.id
	return st, b.version, b.notify
}

// changed wakes whoever waits on the build; the caller holds b.mu.
func (b *build) changed() {
	b.version++
	close(b.notify)
	b.notify = make(chan struct{})
}

func (b *build) state() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.st.State
}

// file is the output file of a finished build named name.
func (b *build) file(name string) (OutputFile, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i, ok := slices.BinarySearchFunc(b.st.Outputs, name, func(f OutputFile, n string) int { return strings.Compare(f.Name, n) })
	if !ok {
		return OutputFile{}, false
	}
	return b.st.Outputs[i], true
}

// names lists the build's files.
func (b *build) names() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.st.Outputs))
	for _, f := range b.st.Outputs {
		out = append(out, f.Name)
	}
	return out
}

// enterPhase is told the conductor's log lines and follows the phases.
func (b *build) enterPhase(phase string, ran bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.st.Phase == phase {
		return
	}
	b.st.Phase = phase
	if ran {
		b.st.Phases = append(b.st.Phases, phase)
	}
	b.changed()
}

// progress matches stamp.Progress: each long step of the build replaces the
// last as the one shown.
func (b *build) progress(name string, total int64) (func(int64), func()) {
	b.mu.Lock()
	p := &Progress{Step: name, Total: max(total, 0)}
	b.st.Progress = p
	b.version++
	b.mu.Unlock()
	add := func(n int64) {
		b.mu.Lock()
		p.Done += n
		b.version++
		b.mu.Unlock()
	}
	done := func() {
		b.mu.Lock()
		if b.st.Progress == p {
			b.st.Progress = nil
			b.version++
		}
		b.mu.Unlock()
	}
	return add, done
}

// record is the cache record a finished build is filed as.
const recordKind = "serve"

// key is the build's cache record key.
func key(id string) string { return "sha256:" + id }

// outputsOf lists a serve record's files as the API shows them, in name
// order.
func outputsOf(id string, blobs []cache.RecordBlob) []OutputFile {
	out := make([]OutputFile, 0, len(blobs))
	for _, bl := range blobs {
		h, err := cache.ParseDigest(bl.Digest)
		if err != nil {
			continue
		}
		out = append(out, OutputFile{Name: bl.Name, Size: bl.Size, SHA256: h, URL: "/v1/images/" + id + "/" + bl.Name})
	}
	slices.SortFunc(out, func(a, b OutputFile) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// lru orders the finished builds in memory, least recently used first.
type lru struct{ l *list.List }

func newLRU() *lru { return &lru{l: list.New()} }

// use puts b last, adding it when new.
func (c *lru) use(b *build) {
	if b.elem != nil {
		c.l.MoveToBack(b.elem)
		return
	}
	b.elem = c.l.PushBack(b)
}

func (c *lru) remove(b *build) {
	if b.elem != nil {
		c.l.Remove(b.elem)
		b.elem = nil
	}
}

// oldest is the least recently used build, or nil.
func (c *lru) oldest() *build {
	if e := c.l.Front(); e != nil {
		return e.Value.(*build)
	}
	return nil
}

func (c *lru) len() int { return c.l.Len() }
