package readback

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/formats/attest"
	"github.com/stamp-dev/stamp/rootfs"
)

// Inspection is an output read back without mounting, with the record the
// build embedded in it.
type Inspection struct {
	Image *formats.Image
	// Record is the embedded record, nil when the image has none or it does
	// not parse (RecordErr says why).
	Record    *attest.Record
	RecordErr error
	// TreeDigest is the digest of the image's tree when the format carries
	// every field the digest covers; "" otherwise.
	TreeDigest string
	// Sections are what the caller learned from files of the image (such
	// as the container images in containerd's state), printed after the
	// record.
	Sections []Section
}

// Section is a titled list of lines Write prints.
type Section struct {
	Title string
	Lines []string
}

// Inspect reads the output at path, of any format stamp reads.
func Inspect(ctx context.Context, path string) (*Inspection, error) {
	im, err := formats.ReadImage(ctx, path)
	if err != nil {
		return nil, err
	}
	in := &Inspection{Image: im}
	if im.Record == nil {
		in.RecordErr = fmt.Errorf("the image holds no %s", rootfs.RecordPath)
	} else {
		var r attest.Record
		if err := json.Unmarshal(im.Record, &r); err != nil {
			in.RecordErr = fmt.Errorf("%s: %w", rootfs.RecordPath, err)
		} else {
			in.Record = &r
		}
	}
	if im.Complete {
		in.TreeDigest = im.Tree.Digest()
	}
	return in, nil
}

// Check verifies the image against its embedded record: every file's
// sha256, every recorded path present, nothing unrecorded, and the tree
// digest where the format carries all it covers. It returns one line per
// problem, in byte order of path.
func (in *Inspection) Check() []string {
	if in.Record == nil {
		return []string{in.RecordErr.Error()}
	}
	var problems []string
	tree := in.Image.Tree
	recorded := map[string]bool{}
	skipped := false
	for _, re := range in.Record.Entries {
		recorded[re.Path] = true
		e := tree.Get(re.Path)
		switch {
		case e == nil && in.cannotCarry(re.Type):
			skipped = true
		case e == nil:
			problems = append(problems, fmt.Sprintf("%s: in the record, missing from the image", re.Path))
		case re.SHA256 != "" && e.Type != rootfs.TypeRegular:
			problems = append(problems, fmt.Sprintf("%s: content: the record has a file with sha256 %s, the image a %s", re.Path, re.SHA256, e.Type))
		case re.SHA256 != "" && e.Digest != re.SHA256:
			problems = append(problems, fmt.Sprintf("%s: content: sha256 %s in the record, %s in the image", re.Path, re.SHA256, e.Digest))
		}
	}
	for _, p := range tree.Paths() {
		if !recorded[p] && !holdsRecord(p) {
			problems = append(problems, fmt.Sprintf("%s: in the image, not in the record", p))
		}
	}
	if in.TreeDigest != "" && in.TreeDigest != in.Record.TreeDigest && len(problems) == 0 && !skipped {
		// Contents and paths agree, so metadata (a mode, an owner) changed.
		problems = append(problems, fmt.Sprintf("tree digest: %s in the record, %s from the image's entries (metadata differs)", in.Record.TreeDigest, in.TreeDigest))
	}
	sort.Strings(problems)
	return problems
}

// cannotCarry reports whether the image's format cannot hold entries of the
// type the record names ("socket").
func (in *Inspection) cannotCarry(typ string) bool {
	for _, t := range in.Image.Cannot {
		if t.String() == typ {
			return true
		}
	}
	return false
}

// holdsRecord reports whether p is the record or a directory above it,
// which the record cannot list: it is written after the list is made.
func holdsRecord(p string) bool {
	return p == rootfs.RecordPath || strings.HasPrefix(rootfs.RecordPath, strings.TrimSuffix(p, "/")+"/")
}

// Write prints what the image is: format, partitions, filesystems, the
// entries it holds and a summary of its embedded record.
func (in *Inspection) Write(w io.Writer) {
	im := in.Image
	fmt.Fprintf(w, "image:        %s\n", im.Path)
	format := im.Format
	if im.Compression != "" && im.Compression != "none" {
		format += " (" + string(im.Compression) + ")"
	}
	fmt.Fprintf(w, "format:       %s, %d bytes\n", format, im.Size)
	if len(im.Partitions) == 0 {
		fmt.Fprintf(w, "partitions:   none\n")
	} else {
		fmt.Fprintf(w, "partitions:\n")
		for _, p := range im.Partitions {
			fmt.Fprintf(w, "  %d %-12s type %s guid %s start %d size %d %s\n", p.Index, p.Name, p.Type, p.GUID, p.Start, p.Size, p.Filesystem)
		}
	}
	for _, fs := range im.Filesystems {
		fmt.Fprintf(w, "filesystem:   %s", fs.Type)
		if fs.Partition > 0 {
			fmt.Fprintf(w, " on partition %d", fs.Partition)
		}
		if fs.Label != "" {
			fmt.Fprintf(w, " label %q", fs.Label)
		}
		if fs.UUID != "" {
			fmt.Fprintf(w, " uuid %s", fs.UUID)
		}
		fmt.Fprintf(w, ", %d bytes, %d entries\n", fs.Size, fs.Files)
		for _, f := range fs.Facts {
			fmt.Fprintf(w, "  %s: %s\n", f.Key, f.Value)
		}
	}
	for _, f := range im.Facts {
		fmt.Fprintf(w, "%-13s %s\n", f.Key+":", f.Value)
	}
	fmt.Fprintf(w, "entries:      %s\n", entrySummary(im.Tree))
	if len(im.Extra) > 0 {
		fmt.Fprintf(w, "format adds:  %d entries beyond the tree\n", len(im.Extra))
	}
	defer in.writeSections(w)
	if in.Record == nil {
		fmt.Fprintf(w, "record:       %v\n", in.RecordErr)
		return
	}
	r := in.Record
	fmt.Fprintf(w, "record:       %s\n", rootfs.RecordPath)
	fmt.Fprintf(w, "  name:       %s (%s)\n", r.Name, r.Arch)
	fmt.Fprintf(w, "  epoch:      %d (%s)\n", r.Epoch, time.Unix(r.Epoch, 0).UTC().Format(time.RFC3339))
	if r.Recipe != nil {
		fmt.Fprintf(w, "  recipe:     %s %s (without its outputs)\n", r.Recipe.File, r.Recipe.PhasesDigest)
	}
	switch {
	case in.TreeDigest == "":
		fmt.Fprintf(w, "  tree:       %s\n", r.TreeDigest)
	case in.TreeDigest == r.TreeDigest:
		fmt.Fprintf(w, "  tree:       %s (the image's entries give the same digest)\n", r.TreeDigest)
	default:
		fmt.Fprintf(w, "  tree:       %s (the image's entries give %s)\n", r.TreeDigest, in.TreeDigest)
	}
	fmt.Fprintf(w, "  inputs:     %d\n", len(r.Inputs))
	for _, i := range r.Inputs {
		fmt.Fprintf(w, "    %s %s %s %s\n", i.Field, i.Kind, i.URI, i.Digest)
	}
	fmt.Fprintf(w, "  origins:    %d paths\n", len(r.Entries))
	counts := map[string]int{}
	for _, e := range r.Entries {
		counts[e.Layer]++
	}
	layers := make([]string, 0, len(counts))
	for l := range counts {
		layers = append(layers, l)
	}
	sort.Strings(layers)
	for _, l := range layers {
		name := l
		if name == "" {
			name = "(none)"
		}
		fmt.Fprintf(w, "    %-40s %d paths\n", name, counts[l])
	}
}

func (in *Inspection) writeSections(w io.Writer) {
	for _, s := range in.Sections {
		fmt.Fprintf(w, "%-13s %d lines\n", s.Title+":", len(s.Lines))
		for _, l := range s.Lines {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
}

// entrySummary counts a tree's entries by type, file bytes and hard links.
func entrySummary(tree *rootfs.Sealed) string {
	var byType [8]int
	var bytes int64
	links := 0
	tree.Walk(func(e *rootfs.Entry) error {
		if int(e.Type) < len(byType) {
			byType[e.Type]++
		}
		if e.Type == rootfs.TypeRegular {
			bytes += e.Size
		}
		if e.Type != rootfs.TypeDir && e.Nlink() > 1 {
			links++
		}
		return nil
	})
	var parts []string
	for t := rootfs.TypeRegular; t <= rootfs.TypeSocket; t++ {
		if byType[t] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", byType[t], t))
		}
	}
	return fmt.Sprintf("%d (%s), %d bytes of file data, %d paths in hard-link groups", tree.Len(), strings.Join(parts, ", "), bytes, links)
}
