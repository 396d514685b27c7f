package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The state directory, <cache>/serve, is the server's small database:
//
//	builds/<id>.json  a build's request and what became of it (saved)
//	builds/<id>.log   its log, one JSON object a line
//	inflight/<id>     a build queued or running, to run again after a crash
//	work/             the builds' work and output directories, cleared at start
//	work.old-*        a last run's, being removed
//	lock              held by the one server using the directory
//
// What a finished build made is not here: it is a record in the cache.

func (s *Server) statePath(id string) string { return filepath.Join(s.state, "builds", id+".json") }
func (s *Server) logPath(id string) string   { return filepath.Join(s.state, "builds", id+".log") }
func (s *Server) markPath(id string) string  { return filepath.Join(s.state, "inflight", id) }

// save writes the build's state. A failure (a full disk) is logged: the
// build goes on, and only a restart would lose what was not saved.
func (s *Server) save(b *build) {
	b.saveMu.Lock()
	defer b.saveMu.Unlock()
	st, _, _ := b.snapshot()
	st.Log, st.URL, st.Progress = "", "", nil
	data, err := json.MarshalIndent(saved{Status: st, Token: b.token, Asked: b.asked}, "", "  ")
	if err == nil {
		err = writeAtomic(s.statePath(b.id), append(data, '\n'), st.State == stateDone || st.State == stateFailed)
	}
	if err != nil {
		s.log.WithError(err).WithField("build", b.id).Warn("cannot save the build's state")
	}
}

// writeAtomic writes a file whole under its name, synced when durable.
func writeAtomic(p string, data []byte, durable bool) error {
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// loadSaved reads a build's saved state; nil when there is none.
func (s *Server) loadSaved(id string) (*saved, error) {
	data, err := os.ReadFile(s.statePath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var sv saved
	if err := json.Unmarshal(data, &sv); err != nil || sv.ID != id {
		return nil, fmt.Errorf("state of build %s: unreadable (%v)", id, err)
	}
	return &sv, nil
}

// mark notes a build as queued or running until it finishes.
func (s *Server) mark(id string) {
	if err := os.WriteFile(s.markPath(id), nil, 0o600); err != nil {
		s.log.WithError(err).WithField("build", id).Warn("cannot note the build as running: a crash would forget it")
	}
}

func (s *Server) unmark(id string) {
	if err := os.Remove(s.markPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.WithError(err).WithField("build", id).Warn("cannot note the build as finished")
	}
}

// resume takes up the builds a previous run left queued or running: each
// is queued again, or, once it has been started maxAttempts times, failed.
// Its files were never filed as a record, so nothing of it was or will be
// served until it finishes.
func (s *Server) resume(ctx context.Context) error {
	ents, err := os.ReadDir(filepath.Join(s.state, "inflight"))
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	var again []*build
	for _, e := range ents {
		id := e.Name()
		if !validID(id) {
			continue
		}
		sv, err := s.loadSaved(id)
		if err != nil || sv == nil || (sv.State != stateQueued && sv.State != stateRunning) {
			s.unmark(id)
			continue
		}
		b := newBuild(sv.Status, sv.Token)
		b.asked = sv.Asked
		log := s.log.WithField("build", id).WithField("recipe", sv.Recipe)
		if sv.Attempts >= maxAttempts {
			log.Warnf("build was interrupted %d times; reporting it failed", sv.Attempts)
			now := time.Now().UTC()
			b.st.State, b.st.Finished = stateFailed, &now
			b.st.Error = &APIError{Message: fmt.Sprintf("the build was interrupted by a restart of the server %d times; POST it again to retry", sv.Attempts)}
			s.save(b)
			s.unmark(id)
			s.mu.Lock()
			s.keepFinished(b)
			s.mu.Unlock()
			continue
		}
		log.Info("build was interrupted by a restart; running it again")
		b.st.State, b.st.Phase, b.st.Phases, b.st.Started = stateQueued, "", nil, nil
		s.save(b)
		s.mu.Lock()
		s.builds[id] = b
		s.perToken[b.token]++
		s.mu.Unlock()
		again = append(again, b)
	}
	// They were all taken once; the queue's bound is for new requests.
	go func() {
		for _, b := range again {
			select {
			case s.queue <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	return nil
}

// validID tells whether id is a build ID: 64 lowercase hex digits.
func validID(id string) bool {
	if len(id) != 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
