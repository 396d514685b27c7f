package formats

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/stamp-dev/stamp/disk/vmdk"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// ovaImageReader reads an OVA: its descriptor, its manifest (every digest
// checked) and the guest disk of its VMDK.
type ovaImageReader struct{}

func (ovaImageReader) Format() string { return "ova" }

// Match takes a plain tar whose first member is an OVF descriptor, as
// DSP0243 requires of an OVA.
func (ovaImageReader) Match(h *Head) bool {
	if h.IsDir || h.Compression != compress.None || len(h.Raw) < 512 || string(h.Raw[257:262]) != "ustar" {
		return false
	}
	name, _, _ := bytes.Cut(h.Raw[:100], []byte{0})
	return strings.HasSuffix(string(name), ".ovf")
}

// OVF is what stamp reads of an OVF descriptor.
type OVF struct {
	XMLName    xml.Name `xml:"Envelope"`
	References []struct {
		Href string `xml:"href,attr"`
		ID   string `xml:"id,attr"`
		Size int64  `xml:"size,attr"`
	} `xml:"References>File"`
	Disks []struct {
		Capacity  int64  `xml:"capacity,attr"`
		Units     string `xml:"capacityAllocationUnits,attr"`
		DiskID    string `xml:"diskId,attr"`
		FileRef   string `xml:"fileRef,attr"`
		Format    string `xml:"format,attr"`
		Populated int64  `xml:"populatedSize,attr"`
	} `xml:"DiskSection>Disk"`
	Networks []struct {
		Name string `xml:"name,attr"`
	} `xml:"NetworkSection>Network"`
	System struct {
		ID   string `xml:"id,attr"`
		Name string `xml:"Name"`
		OS   struct {
			ID     string `xml:"id,attr"`
			OSType string `xml:"osType,attr"`
		} `xml:"OperatingSystemSection"`
		Type  string `xml:"VirtualHardwareSection>System>VirtualSystemType"`
		Items []struct {
			ResourceType    int    `xml:"ResourceType"`
			ResourceSubType string `xml:"ResourceSubType"`
			VirtualQuantity int64  `xml:"VirtualQuantity"`
			AllocationUnits string `xml:"AllocationUnits"`
			HostResource    string `xml:"HostResource"`
			Connection      string `xml:"Connection"`
			InstanceID      string `xml:"InstanceID"`
			Parent          string `xml:"Parent"`
		} `xml:"VirtualHardwareSection>Item"`
		Config []struct {
			Key   string `xml:"key,attr"`
			Value string `xml:"value,attr"`
		} `xml:"VirtualHardwareSection>Config"`
	} `xml:"VirtualSystem"`
}

// ParseOVF decodes an OVF descriptor.
func ParseOVF(b []byte) (*OVF, error) {
	var o OVF
	if err := xml.Unmarshal(b, &o); err != nil {
		return nil, fmt.Errorf("the OVF descriptor: %w", err)
	}
	if o.XMLName.Space != "http://schemas.dmtf.org/ovf/envelope/1" {
		return nil, fmt.Errorf("the OVF descriptor's envelope is in namespace %q, not OVF 1's", o.XMLName.Space)
	}
	return &o, nil
}

// ovaMember is a member of an OVA, its data in place in the file.
type ovaMember struct {
	Name      string
	Off, Size int64
}

// ovaPackage is an OVA's members, descriptor and manifest.
type ovaPackage struct {
	Members  []ovaMember
	OVF      *OVF
	Manifest map[string]string // file -> "ALG:hex"
	disk     *ovaMember
}

// maxOVAText bounds the descriptor and manifest a reader loads.
const maxOVAText = 16 << 20

// readOVA lists the members of the OVA in f without reading their data,
// and reads its descriptor and manifest.
func readOVA(f *os.File, size int64) (*ovaPackage, error) {
	sr := io.NewSectionReader(f, 0, size)
	tr := tar.NewReader(sr)
	p := &ovaPackage{Manifest: map[string]string{}}
	var ovfData []byte
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		// The tar reader seeks past data it is not asked for, so the
		// position after a header is where the member's data lies.
		off, err := sr.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, err
		}
		m := ovaMember{Name: hdr.Name, Off: off, Size: hdr.Size}
		if hdr.Typeflag != tar.TypeReg || strings.Contains(hdr.Name, "/") {
			return nil, fmt.Errorf("member %s: an OVA holds plain files only", hdr.Name)
		}
		switch ext := path.Ext(hdr.Name); {
		case len(p.Members) == 0 && ext != ".ovf":
			return nil, fmt.Errorf("the first member is %s, not the OVF descriptor", hdr.Name)
		case ext == ".ovf" || ext == ".mf":
			if hdr.Size > maxOVAText {
				return nil, fmt.Errorf("member %s of %d bytes is larger than this reader loads", hdr.Name, hdr.Size)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, fmt.Errorf("member %s: %w", hdr.Name, err)
			}
			if ext == ".ovf" {
				if ovfData != nil {
					return nil, fmt.Errorf("member %s: a second OVF descriptor", hdr.Name)
				}
				ovfData = b
			} else if err := parseManifest(b, p.Manifest); err != nil {
				return nil, fmt.Errorf("member %s: %w", hdr.Name, err)
			}
		}
		p.Members = append(p.Members, m)
	}
	if ovfData == nil {
		return nil, errors.New("no OVF descriptor")
	}
	o, err := ParseOVF(ovfData)
	if err != nil {
		return nil, err
	}
	p.OVF = o
	if len(o.Disks) != 1 {
		return nil, fmt.Errorf("the descriptor lists %d disks; stamp reads an OVA of one", len(o.Disks))
	}
	for _, r := range o.References {
		if r.ID != o.Disks[0].FileRef {
			continue
		}
		for i := range p.Members {
			if p.Members[i].Name == r.Href {
				p.disk = &p.Members[i]
			}
		}
		if p.disk == nil {
			return nil, fmt.Errorf("the disk's file %s is not in the archive", r.Href)
		}
	}
	if p.disk == nil {
		return nil, fmt.Errorf("the disk's file reference %q names no file", o.Disks[0].FileRef)
	}
	return p, nil
}

// parseManifest reads "ALG(file)= hex" lines into m as "ALG:hex".
func parseManifest(b []byte, m map[string]string) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		alg, rest, ok1 := strings.Cut(line, "(")
		file, sum, ok2 := strings.Cut(rest, ")=")
		if !ok1 || !ok2 {
			return fmt.Errorf("manifest line %q is not ALG(file)= digest", line)
		}
		m[file] = alg + ":" + strings.TrimSpace(sum)
	}
	return sc.Err()
}

// check verifies every SHA256 digest of the manifest against the members.
func (p *ovaPackage) check(ctx context.Context, f *os.File) error {
	for _, m := range p.Members {
		want, ok := p.Manifest[m.Name]
		if !ok {
			if path.Ext(m.Name) == ".mf" {
				continue
			}
			return fmt.Errorf("member %s is not in the manifest", m.Name)
		}
		alg, sum, _ := strings.Cut(want, ":")
		if alg != "SHA256" {
			return fmt.Errorf("member %s: the manifest's %s digest is not checked here (SHA256 only)", m.Name, alg)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, m.Off, m.Size)); err != nil {
			return fmt.Errorf("member %s: %w", m.Name, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != strings.ToLower(sum) {
			return fmt.Errorf("member %s: sha256 %s, the manifest says %s", m.Name, got, sum)
		}
	}
	return nil
}

// ovaDisk opens the VMDK of the OVA in f.
func ovaDisk(f *os.File, size int64) (*ovaPackage, *vmdk.Reader, error) {
	p, err := readOVA(f, size)
	if err != nil {
		return nil, nil, err
	}
	v, err := vmdk.Open(io.NewSectionReader(f, p.disk.Off, p.disk.Size), p.disk.Size)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", p.disk.Name, err)
	}
	return p, v, nil
}

// OpenDisk implements DiskOpener: the guest disk of the OVA's VMDK.
func (ovaImageReader) OpenDisk(f *os.File, size int64) (io.ReaderAt, int64, error) {
	_, v, err := ovaDisk(f, size)
	if err != nil {
		return nil, 0, err
	}
	return v, v.Size(), nil
}

func (ovaImageReader) Read(ctx context.Context, h *Head) (*Image, error) {
	f, err := os.Open(h.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, v, err := ovaDisk(f, h.Size)
	if err != nil {
		return nil, err
	}
	if len(p.Manifest) > 0 {
		if err := p.check(ctx, f); err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
	}
	im := &Image{Path: h.Path, Format: "ova", Compression: compress.None, Size: h.Size, Plain: PlainGuestDisk}
	var names []string
	for _, m := range p.Members {
		names = append(names, m.Name)
	}
	o := p.OVF
	im.Facts = append(im.Facts, Fact{"ova.files", strings.Join(names, " ")}, Fact{"ova.manifest", strconv.Itoa(len(p.Manifest)) + " digests checked"},
		Fact{"ova.hardware", o.System.Type}, Fact{"ova.os-type", o.System.OS.OSType})
	for _, it := range o.System.Items {
		switch it.ResourceType {
		case 3:
			im.Facts = append(im.Facts, Fact{"ova.cpus", strconv.FormatInt(it.VirtualQuantity, 10)})
		case 4:
			im.Facts = append(im.Facts, Fact{"ova.memory", strconv.FormatInt(it.VirtualQuantity, 10) + " " + it.AllocationUnits})
		case 10:
			im.Facts = append(im.Facts, Fact{"ova.nic", it.ResourceSubType + " on " + it.Connection})
		case 5, 6, 20:
			im.Facts = append(im.Facts, Fact{"ova.controller", it.ResourceSubType})
		}
	}
	for _, c := range o.System.Config {
		if c.Key == "firmware" {
			im.Facts = append(im.Facts, Fact{"ova.firmware", c.Value})
		}
	}
	im.Facts = append(im.Facts, vmdkFacts(v, "ova.vmdk.")...)
	if err := readDisk(ctx, v, v.Size(), im); err != nil {
		return nil, err
	}
	return im, nil
}
