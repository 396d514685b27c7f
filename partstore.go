package stamp

import (
	"encoding/json"
	"io"
	"os"
	"sync"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// partsData is a parts record's own data.
type partsData struct {
	// Stamp is the digest of the stamp that compressed the parts: another
	// stamp may compress the same bytes differently.
	Stamp string             `json:"stamp"`
	Parts []formats.FilePart `json:"parts"`
}

// fileParts files the parts of an output just filed under outputKey;
// blobs are the digests of its files by name.
func (bc *buildCache) fileParts(subject, outputKey string, parts []formats.FilePart, blobs map[string]cache.RecordBlob) {
	if !bc.write || len(parts) == 0 {
		return
	}
	r := &cache.Record{Kind: recordParts, Subject: subject, Parts: []cache.Part{{Name: "output", Digest: outputKey}}}
	r.Key = cache.KeyOf(r.Parts)
	seen := map[string]bool{}
	for _, p := range parts {
		b, ok := blobs[p.File]
		if !ok {
			return
		}
		if !seen[p.File] {
			seen[p.File] = true
			r.Blobs = append(r.Blobs, b)
		}
	}
	r.Data, _ = json.Marshal(partsData{Stamp: bc.self, Parts: parts})
	if err := bc.c.PutRecord(r); err != nil {
		bc.log.WithError(err).Warnf("cache: cannot file the parts of %s", subject)
	}
}

// partStore is the formats.PartStore of one output: the parts the last
// build of its subject filed. nil when there are none to take.
func (bc *buildCache) partStore(subject string) *outputParts {
	if !bc.read {
		return nil
	}
	r := bc.c.LastRecord(recordParts, subject)
	if r == nil {
		return nil
	}
	var d partsData
	if err := json.Unmarshal(r.Data, &d); err != nil || d.Stamp != bc.self {
		return nil
	}
	blobs := map[string]string{}
	for _, b := range r.Blobs {
		blobs[b.Name] = b.Digest
	}
	s := &outputParts{c: bc.c, byKey: map[string]partAt{}, files: map[string]*partBlob{}, taken: map[string]bool{}}
	for _, p := range d.Parts {
		if digest, ok := blobs[p.File]; ok && p.Key != "" && p.Size >= 0 {
			s.byKey[p.Key] = partAt{blob: digest, off: p.Offset, size: p.Size, sum: p.Sum, meta: p.Meta}
		}
	}
	if len(s.byKey) == 0 {
		return nil
	}
	return s
}

type partAt struct {
	blob      string
	off, size int64
	sum, meta string
}

// outputParts reads parts out of the blobs an earlier build filed. The
// cache checks a blob against its sha256 as it opens it (or knows it
// unchanged since it last did), and every part is checked against its part
// sum as it is copied, which keeps a wrong offset filed from reaching an
// output: a part that fails is compressed again.
type outputParts struct {
	c     *cache.Cache
	byKey map[string]partAt

	mu    sync.Mutex
	files map[string]*partBlob // nil: the blob could not be opened
	// taken holds the keys of the parts taken: files of the same content
	// take one part many times.
	taken map[string]bool
	// bufs hold Part's copy buffers: io.Copy would allocate one per part,
	// and a rebuild of the live image takes eighteen thousand parts.
	bufs sync.Pool
}

func (s *outputParts) Part(key string, w io.Writer) (string, bool) {
	at, ok := s.byKey[key]
	if !ok {
		return "", false
	}
	f := s.open(at.blob)
	if f == nil {
		return "", false
	}
	h := hashio.NewPartSum()
	buf, _ := s.bufs.Get().(*[]byte)
	if buf == nil {
		b := make([]byte, 256<<10)
		buf = &b
	}
	n, err := io.CopyBuffer(io.MultiWriter(w, h), io.NewSectionReader(f.r, at.off, at.size), *buf)
	s.bufs.Put(buf)
	if err != nil || n != at.size || hashio.PartSumHex(h) != at.sum {
		return "", false
	}
	s.mu.Lock()
	s.taken[key] = true
	s.mu.Unlock()
	return at.meta, true
}

// partBlob is a blob parts are read from, past the page cache: the
// blobs are outputs of gigabytes, read once per build and seldom still in
// the page cache.
type partBlob struct {
	f *os.File
	r *hashio.DirectReader
}

func (s *outputParts) open(digest string) *partBlob {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.files[digest]
	if !ok {
		if f, err := s.c.OpenFile(digest); err == nil {
			b = &partBlob{f: f, r: hashio.NewDirectReader(f)}
		}
		s.files[digest] = b
	}
	return b
}

// close closes the blobs and says how many parts were taken.
func (s *outputParts) close() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.files {
		if b != nil {
			b.r.Close()
			b.f.Close()
		}
	}
	s.files = map[string]*partBlob{}
	return int64(len(s.taken))
}
