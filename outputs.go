package stamp

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/formats/attest"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// Names of the files every build writes beside its outputs.
const (
	SumsFile     = attest.SumsFile
	ManifestFile = attest.ManifestFile
)

// outputBase is the file name stem of an output: the recipe's name, plus the
// output's own name when it is not just the format.
func outputBase(rec *recipes.Recipe, out *recipes.Output) string {
	if out.Name == "" || out.Name == out.Format {
		return rec.Name
	}
	return rec.Name + "-" + out.Name
}

// writeOutputs writes every output into a staging directory inside the
// output directory and moves the files to their final names only when all of
// them, the manifest and the sums are complete.
func writeOutputs(ctx context.Context, rec *recipes.Recipe, o *Options, work string, tree *rootfs.Sealed, ep time.Time, treeDigest string, att *attestation) (names []string, err error) {
	log := o.log()
	if err := os.MkdirAll(o.OutputDir, 0o755); err != nil {
		return nil, fmt.Errorf("output dir: %w", err)
	}
	staging, err := os.MkdirTemp(o.OutputDir, ".stamp-staging-")
	if err != nil {
		return nil, fmt.Errorf("output dir: %w", err)
	}
	defer os.RemoveAll(staging)

	var manifest bytes.Buffer
	fmt.Fprintf(&manifest, "# stamp manifest v1: %s\n# tree %s\n", rec.Name, treeDigest)
	if err := rootfs.WriteManifest(&manifest, tree.Entries(), true); err != nil {
		return nil, err
	}
	mainFile := map[string]string{}
	addsOf := map[string][]string{} // manifest lines of what each output added
	known := map[string]string{}    // sums the formats computed while writing
	var files []string
	for i := range rec.Outputs {
		out := &rec.Outputs[i]
		f, err := formats.Lookup(out.Format)
		if err != nil {
			return nil, &UsageError{Msg: fmt.Sprintf("%s.format: %v", out.Field, err)}
		}
		// Each output has scratch space of its own in the work directory,
		// for its own view of the tree, gone once it is written.
		scratch, err := os.MkdirTemp(work, "output-")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", out.Field, err)
		}
		src := &formats.Source{Tree: tree, Epoch: ep, Name: rec.Name, Arch: rec.Arch, Seed: seed(rec),
			WorkDir: scratch, Log: log.WithField("output", out.Name), Progress: o.Progress}
		if out.From != "" {
			src.From = filepath.Join(staging, mainFile[out.From])
			src.FromAdds = addsOf[out.From]
		}
		start := time.Now()
		spec, err := outputSpec(out)
		if err != nil {
			return nil, err
		}
		res, err := f.Write(ctx, src, spec, staging, outputBase(rec, out))
		os.RemoveAll(scratch)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", out.Field, out.Format, err)
		}
		addsOf[out.Name] = res.Adds
		for _, w := range res.Warnings {
			log.Warnf("%s: %s", out.Name, w)
		}
		for name, h := range res.Sums {
			known[name] = h
		}
		mainFile[out.Name] = res.Files[0]
		files = append(files, res.Files...)
		fmt.Fprintf(&manifest, "## output %s %s\n", out.Name, res.Files[0])
		for _, a := range res.Adds {
			manifest.WriteString(a + "\n")
		}
		log.Infof("wrote %s in %s", res.Files[0], time.Since(start).Round(time.Millisecond))
	}
	sort.Strings(files)
	var sums bytes.Buffer
	var subjects []attest.Sum
	sumFiles, err := sumNames(staging, files)
	if err != nil {
		return nil, err
	}
	for _, name := range sumFiles {
		h, ok := known[name]
		if !ok {
			if h, _, err = hashio.File(filepath.Join(staging, name), false); err != nil {
				return nil, err
			}
		}
		fmt.Fprintf(&sums, "%s  %s\n", h, name)
		subjects = append(subjects, attest.Sum{Name: name, SHA256: h})
	}
	sbom, err := sbomJSON(tree, rec, ep, treeDigest, att.inputs)
	if err != nil {
		return nil, err
	}
	byproducts := []attest.Sum{{Name: ManifestFile, SHA256: bytesSHA256(manifest.Bytes())}, {Name: SBOMFile, SHA256: bytesSHA256(sbom)}}
	prov, err := provenanceJSON(rec, ep, att.recipeDigest, treeDigest, att.deps, subjects, byproducts)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(staging, SBOMFile), sbom, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(staging, ProvenanceFile), prov, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(staging, ManifestFile), manifest.Bytes(), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(staging, SumsFile), sums.Bytes(), 0o644); err != nil {
		return nil, err
	}
	// SHA256SUMS comes last, so its presence says the rest is in place.
	all := append(append([]string{}, files...), ManifestFile, SBOMFile, ProvenanceFile, SumsFile)
	for _, name := range all {
		// Modes are set explicitly so the umask of whoever builds does not show.
		if err := chmodOutput(filepath.Join(staging, name)); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, name := range all {
		if err := renameOutput(staging, name, filepath.Join(o.OutputDir, name)); err != nil {
			return nil, fmt.Errorf("moving %s into place: %w", name, err)
		}
	}
	return all, nil
}

// outputSpec is an output as the recipe asks for it, in the formats' terms.
func outputSpec(out *recipes.Output) (*formats.Spec, error) {
	conv, ok := outputOptions[out.Format]
	if !ok {
		return nil, &UsageError{Msg: fmt.Sprintf("%s.format: output format %q is not supported by this version of stamp", out.Field, out.Format)}
	}
	opts, err := conv(out)
	if err != nil {
		return nil, &UsageError{Msg: fmt.Sprintf("%s.%v", out.Field, err)}
	}
	return &formats.Spec{Format: out.Format, Name: out.Name, From: out.From, Options: opts}, nil
}

// outputOptions turns each format's options as the recipe schema decoded
// them into the format's own typed options (formats does not import
// recipes); a new format is one line here. A test holds it against both
// tables.
var outputOptions = map[string]func(out *recipes.Output) (any, error){
	recipes.FormatTar: func(out *recipes.Output) (any, error) {
		alg, err := outputCompression(out)
		return &formats.TarSpec{Compression: alg}, err
	},
	recipes.FormatCpio: func(out *recipes.Output) (any, error) {
		alg, err := outputCompression(out)
		return &formats.CpioSpec{Compression: alg}, err
	},
	recipes.FormatPXE: func(out *recipes.Output) (any, error) {
		alg, err := outputCompression(out)
		o := &formats.PXESpec{Compression: alg}
		if out.Boot != nil {
			o.Cmdline = out.Boot.Cmdline
		}
		return o, err
	},
	recipes.FormatQcow2: func(out *recipes.Output) (any, error) {
		return &formats.Qcow2Spec{Compress: out.Compression == "zlib"}, nil
	},
	recipes.FormatVHD: func(out *recipes.Output) (any, error) {
		return &formats.VHDSpec{Dynamic: out.Type == "dynamic"}, nil
	},
	recipes.FormatVMDK: func(out *recipes.Output) (any, error) {
		return &formats.VMDKSpec{Type: out.Type}, nil
	},
	recipes.FormatOVA: func(out *recipes.Output) (any, error) {
		return &formats.OVASpec{CPUs: out.CPUs, Memory: out.Memory, Firmware: out.Firmware, Network: out.Network}, nil
	},
	recipes.FormatGCE: func(out *recipes.Output) (any, error) { return &formats.GCESpec{}, nil },
	recipes.FormatOCI: func(out *recipes.Output) (any, error) {
		alg, err := outputCompression(out)
		return &formats.OCISpec{Kind: out.Kind, Layout: out.Layout, Compression: alg,
			Entrypoint: out.Entrypoint, Env: out.Env, Labels: out.Labels}, err
	},
	recipes.FormatRaw: rawOptions,
}

func outputCompression(out *recipes.Output) (compress.Algorithm, error) {
	alg, err := compress.Parse(out.Compression)
	if err != nil {
		return "", fmt.Errorf("compression: %w", err)
	}
	return alg, nil
}

// rawOptions carries a raw disk's layout into the formats' terms; the
// schema has already read its sizes into bytes.
func rawOptions(out *recipes.Output) (any, error) {
	o := &formats.RawSpec{Size: out.Size, FreeSpace: out.FreeSpace, Grow: out.Grow == nil || *out.Grow}
	for _, p := range out.Partitions {
		o.Partitions = append(o.Partitions, formats.PartitionSpec{Name: p.Name, Type: p.Type, Size: p.Size, Filesystem: p.Filesystem, Label: p.Label})
	}
	if b := out.Boot; b != nil {
		o.Boot = &formats.BootSpec{Loader: b.Loader, Cmdline: b.Cmdline, BIOS: b.BIOS}
	}
	return o, nil
}

func seed(rec *recipes.Recipe) string {
	if rec.Seed != "" {
		return rec.Seed
	}
	return rec.Name
}
