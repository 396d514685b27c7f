package containerd

import (
	"encoding/binary"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// MetaDBPath and SnapshotsDBPath are where containerd's databases live in a
// tree whose configuration names the default state directory.
var (
	MetaDBPath      = path.Join(DefaultRoot, metadataDir, metaDB)
	SnapshotsDBPath = path.Join(DefaultRoot, "io.containerd.snapshotter.v1."+Snapshotter, snapshotsDB)
)

// State is what containerd's databases say it holds.
type State struct {
	// DBVersion is the metadata database's minor version.
	DBVersion int64
	Images    []StateImage
	Snapshots []StateSnapshot
}

// StateImage is one image record.
type StateImage struct {
	Namespace, Name   string
	Digest, MediaType string
	Size              int64
	Labels            map[string]string
}

// StateSnapshot is one snapshot the metadata database knows, with what the
// snapshotter's own database says of it.
type StateSnapshot struct {
	Namespace, Snapshotter string
	Key, Parent            string
	// Backend is the snapshotter's name for it; ID its directory number
	// there and Kind its kind ("committed", "active", "view"), when the
	// snapshotter's database has it.
	Backend, ID, Kind string
}

// ReadState reads containerd's metadata database and, when given, the
// overlayfs snapshotter's, as their bytes.
func ReadState(meta, snapshots []byte) (*State, error) {
	st := &State{}
	backend := map[string][2]string{} // backend name -> id, kind
	if snapshots != nil {
		err := viewBolt(snapshots, func(tx *bolt.Tx) error {
			b := bucket(tx, "v1", "snapshots")
			if b == nil {
				return nil
			}
			return b.ForEach(func(k, v []byte) error {
				sb := b.Bucket(k)
				if v != nil || sb == nil {
					return nil
				}
				id, _ := binary.Uvarint(sb.Get([]byte("id")))
				kind := "unknown"
				if kb := sb.Get([]byte("kind")); len(kb) == 1 && int(kb[0]) < len(kinds) {
					kind = kinds[kb[0]]
				}
				backend[string(k)] = [2]string{fmt.Sprint(id), kind}
				return nil
			})
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", snapshotsDB, err)
		}
	}
	err := viewBolt(meta, func(tx *bolt.Tx) error {
		v1 := tx.Bucket([]byte("v1"))
		if v1 == nil {
			return fmt.Errorf("no v1 bucket: not containerd's metadata")
		}
		st.DBVersion, _ = binary.Varint(v1.Get([]byte("version")))
		return v1.ForEach(func(ns, v []byte) error {
			nb := v1.Bucket(ns)
			if v != nil || nb == nil {
				return nil
			}
			if ib := nb.Bucket([]byte("images")); ib != nil {
				ib.ForEach(func(name, _ []byte) error {
					b := ib.Bucket(name)
					if b == nil {
						return nil
					}
					im := StateImage{Namespace: string(ns), Name: string(name), Labels: labelsOf(b)}
					if t := b.Bucket([]byte("target")); t != nil {
						im.Digest, im.MediaType = string(t.Get([]byte("digest"))), string(t.Get([]byte("mediatype")))
						im.Size, _ = binary.Varint(t.Get([]byte("size")))
					}
					st.Images = append(st.Images, im)
					return nil
				})
			}
			if sb := nb.Bucket([]byte("snapshots")); sb != nil {
				sb.ForEach(func(sn, _ []byte) error {
					snb := sb.Bucket(sn)
					if snb == nil {
						return nil
					}
					return snb.ForEach(func(key, _ []byte) error {
						b := snb.Bucket(key)
						if b == nil {
							return nil
						}
						s := StateSnapshot{Namespace: string(ns), Snapshotter: string(sn), Key: string(key),
							Parent: string(b.Get([]byte("parent"))), Backend: string(b.Get([]byte("name")))}
						if be, ok := backend[s.Backend]; ok && string(sn) == Snapshotter {
							s.ID, s.Kind = be[0], be[1]
						}
						st.Snapshots = append(st.Snapshots, s)
						return nil
					})
				})
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", metaDB, err)
	}
	return st, nil
}

var kinds = []string{"unknown", "view", "active", "committed"}

func labelsOf(b *bolt.Bucket) map[string]string {
	lb := b.Bucket([]byte("labels"))
	if lb == nil {
		return nil
	}
	out := map[string]string{}
	lb.ForEach(func(k, v []byte) error {
		out[string(k)] = string(v)
		return nil
	})
	return out
}

func bucket(tx *bolt.Tx, names ...string) *bolt.Bucket {
	b := tx.Bucket([]byte(names[0]))
	for _, n := range names[1:] {
		if b == nil {
			return nil
		}
		b = b.Bucket([]byte(n))
	}
	return b
}

// viewBolt opens a copy of a database read-only: bbolt reads a file.
func viewBolt(data []byte, fn func(*bolt.Tx) error) error {
	dir, err := os.MkdirTemp("", "stamp-bolt-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "db")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		return err
	}
	db, err := bolt.Open(p, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(fn)
}

// Lines are the state as inspect prints it: each image with its target
// and CRI labels, then each snapshot with its parent and directory, in
// byte order.
func (st *State) Lines() []string {
	out := []string{fmt.Sprintf("metadata version %d, %d images, %d snapshots", st.DBVersion, len(st.Images), len(st.Snapshots))}
	ims := append([]StateImage(nil), st.Images...)
	sort.Slice(ims, func(i, j int) bool { return ims[i].Namespace+"/"+ims[i].Name < ims[j].Namespace+"/"+ims[j].Name })
	for _, im := range ims {
		l := fmt.Sprintf("image %s/%s -> %s (%s, %d bytes)", im.Namespace, im.Name, im.Digest, im.MediaType, im.Size)
		for _, k := range []string{labelCRIImage, labelCRIPinned} {
			if v := im.Labels[k]; v != "" {
				l += " " + k + "=" + v
			}
		}
		out = append(out, l)
	}
	ss := append([]StateSnapshot(nil), st.Snapshots...)
	sort.Slice(ss, func(i, j int) bool {
		return ss[i].Namespace+"/"+ss[i].Snapshotter+"/"+ss[i].Key < ss[j].Namespace+"/"+ss[j].Snapshotter+"/"+ss[j].Key
	})
	for _, s := range ss {
		l := fmt.Sprintf("snapshot %s/%s/%s", s.Namespace, s.Snapshotter, s.Key)
		if s.Parent != "" {
			l += " parent " + s.Parent
		}
		if s.ID != "" {
			l += fmt.Sprintf(" (%s, snapshots/%s)", s.Kind, s.ID)
		}
		out = append(out, l)
	}
	return out
}
