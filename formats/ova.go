package formats

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"strings"
	"text/template"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/vmdk"
)

// OVASpec is an ova output's options: the virtual machine its OVF
// descriptor describes around the disk.
type OVASpec struct {
	CPUs int
	// Memory in bytes, a whole number of MiB.
	Memory int64
	// Firmware is "efi" or "bios"; "bios" needs the raw disk to boot by
	// BIOS (the raw format's boot.bios).
	Firmware string
	// Network names the network the one NIC is on.
	Network string
}

// OVFDiskFormat is the OVF disk format URI of a stream-optimized VMDK.
const OVFDiskFormat = "http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized"

// ovaFormat packages a raw disk output as an OVF 1.0 appliance in one tar
// (DSP0243's OVA): the descriptor first, as the specification requires, then
// the files it references in their order (the one disk, a stream-optimized
// VMDK of the raw), then the manifest, which the specification allows
// either right after the descriptor or last: last, it is hashed while the
// disk is copied rather than in a pass of its own.
type ovaFormat struct{}

func (ovaFormat) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	so, err := optionsOf[OVASpec](spec)
	if err != nil {
		return nil, err
	}
	o := *so
	if o.Firmware == "bios" {
		if err := rawBootsBIOS(src.From); err != nil {
			return nil, fmt.Errorf("firmware: bios, but the raw disk does not boot by BIOS: %w", err)
		}
	}
	if src.Arch != "" && src.Arch != "amd64" {
		return nil, fmt.Errorf("an ova describes an amd64 virtual machine; arch %s has no OVF description here", src.Arch)
	}
	if o.CPUs == 0 {
		o.CPUs = 2
	}
	if o.Memory == 0 {
		o.Memory = 4 << 30
	}
	if o.Firmware == "" {
		o.Firmware = "efi"
	}
	if o.Network == "" {
		o.Network = "VM Network"
	}
	if o.Memory%(1<<20) != 0 {
		return nil, fmt.Errorf("memory: %d bytes is not a whole number of MiB", o.Memory)
	}
	diskName := base + ".vmdk"
	return encodeRaw(src, spec, dir, base+".ova", func(out *os.File, in io.ReaderAt, size int64, progress func(int64)) error {
		// The tar states each entry's size before its bytes, so the VMDK
		// is written to scratch space first.
		tmp, err := os.CreateTemp(src.WorkDir, "disk-*.vmdk")
		if err != nil {
			return err
		}
		defer os.Remove(tmp.Name())
		defer tmp.Close()
		st, err := vmdk.Write(ctx, tmp, in, size, vmdk.Options{ID: disk.VMDKID(src.Seed, spec.Name), FileName: diskName, Progress: progress})
		if err != nil {
			return err
		}
		ovf, err := ovfDescriptor(ovfValues{Name: base, Disk: diskName, DiskSize: st.FileSize, Capacity: size,
			Populated: st.Grains * vmdk.GrainSize, CPUs: o.CPUs, MemoryMiB: o.Memory >> 20, Firmware: o.Firmware, Network: o.Network})
		if err != nil {
			return err
		}
		tw := tar.NewWriter(out)
		entry := func(name string, size int64) error {
			hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: size, ModTime: src.Epoch, Format: tar.FormatUSTAR}
			if err := tw.WriteHeader(hdr); err != nil {
				return fmt.Errorf("%s: %w (a USTAR entry holds less than 8 GiB)", name, err)
			}
			return nil
		}
		if err := entry(base+".ovf", int64(len(ovf))); err != nil {
			return err
		}
		if _, err := tw.Write(ovf); err != nil {
			return err
		}
		if err := entry(diskName, st.FileSize); err != nil {
			return err
		}
		if _, err := tmp.Seek(0, io.SeekStart); err != nil {
			return err
		}
		h := sha256.New()
		// A cancelled build stops within one read of the disk.
		if _, err := io.Copy(io.MultiWriter(tw, h), &tarCtxReader{ctx: ctx, r: tmp}); err != nil {
			return fmt.Errorf("%s: %w", diskName, err)
		}
		ovfSum := sha256.Sum256(ovf)
		mf := fmt.Sprintf("SHA256(%s.ovf)= %x\nSHA256(%s)= %x\n", base, ovfSum, diskName, h.Sum(nil))
		if err := entry(base+".mf", int64(len(mf))); err != nil {
			return err
		}
		if _, err := io.WriteString(tw, mf); err != nil {
			return err
		}
		return tw.Close()
	})
}

// ovfValues is what the descriptor states.
type ovfValues struct {
	Name, Disk         string
	DiskSize, Capacity int64
	Populated          int64
	CPUs               int
	MemoryMiB          int64
	Firmware, Network  string
}

// ovfTemplate is an OVF 1.0 envelope as vSphere imports one. Within an
// Item the rasd elements are in the alphabetical order the CIM schema's
// sequence requires. The disk is on a SATA (AHCI) controller because the
// raw disk's initramfs carries ahci and not the LSI Logic driver; the NIC
// is a vmxnet3, whose driver the image's kernel loads itself. OS type 101
// is CIM's "Linux 64-Bit", vSphere's otherLinux64Guest. Hardware version
// 13 (ESXi 6.5) is the oldest with EFI and SATA that vSphere still runs.
var ovfTemplate = template.Must(template.New("ovf").Funcs(template.FuncMap{"x": xmlText}).Parse(`<?xml version="1.0" encoding="UTF-8"?>
<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1" xmlns:cim="http://schemas.dmtf.org/wbem/wscim/1/common" xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1" xmlns:rasd="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData" xmlns:vmw="http://www.vmware.com/schema/ovf" xmlns:vssd="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_VirtualSystemSettingData" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
  <References>
    <File ovf:href="{{x .Disk}}" ovf:id="file1" ovf:size="{{.DiskSize}}"/>
  </References>
  <DiskSection>
    <Info>Virtual disk information</Info>
    <Disk ovf:capacity="{{.Capacity}}" ovf:capacityAllocationUnits="byte" ovf:diskId="vmdisk1" ovf:fileRef="file1" ovf:format="` + OVFDiskFormat + `" ovf:populatedSize="{{.Populated}}"/>
  </DiskSection>
  <NetworkSection>
    <Info>The list of logical networks</Info>
    <Network ovf:name="{{x .Network}}">
      <Description>The {{x .Network}} network</Description>
    </Network>
  </NetworkSection>
  <VirtualSystem ovf:id="{{x .Name}}">
    <Info>A virtual machine</Info>
    <Name>{{x .Name}}</Name>
    <OperatingSystemSection ovf:id="101" vmw:osType="otherLinux64Guest">
      <Info>The kind of installed guest operating system</Info>
    </OperatingSystemSection>
    <VirtualHardwareSection>
      <Info>Virtual hardware requirements</Info>
      <System>
        <vssd:ElementName>Virtual Hardware Family</vssd:ElementName>
        <vssd:InstanceID>0</vssd:InstanceID>
        <vssd:VirtualSystemIdentifier>{{x .Name}}</vssd:VirtualSystemIdentifier>
        <vssd:VirtualSystemType>vmx-13</vssd:VirtualSystemType>
      </System>
      <Item>
        <rasd:AllocationUnits>hertz * 10^6</rasd:AllocationUnits>
        <rasd:Description>Number of Virtual CPUs</rasd:Description>
        <rasd:ElementName>{{.CPUs}} virtual CPU(s)</rasd:ElementName>
        <rasd:InstanceID>1</rasd:InstanceID>
        <rasd:ResourceType>3</rasd:ResourceType>
        <rasd:VirtualQuantity>{{.CPUs}}</rasd:VirtualQuantity>
      </Item>
      <Item>
        <rasd:AllocationUnits>byte * 2^20</rasd:AllocationUnits>
        <rasd:Description>Memory Size</rasd:Description>
        <rasd:ElementName>{{.MemoryMiB}}MB of memory</rasd:ElementName>
        <rasd:InstanceID>2</rasd:InstanceID>
        <rasd:ResourceType>4</rasd:ResourceType>
        <rasd:VirtualQuantity>{{.MemoryMiB}}</rasd:VirtualQuantity>
      </Item>
      <Item>
        <rasd:Address>0</rasd:Address>
        <rasd:Description>SATA Controller</rasd:Description>
        <rasd:ElementName>SATA Controller 0</rasd:ElementName>
        <rasd:InstanceID>3</rasd:InstanceID>
        <rasd:ResourceSubType>vmware.sata.ahci</rasd:ResourceSubType>
        <rasd:ResourceType>20</rasd:ResourceType>
      </Item>
      <Item>
        <rasd:AddressOnParent>0</rasd:AddressOnParent>
        <rasd:ElementName>Hard Disk 1</rasd:ElementName>
        <rasd:HostResource>ovf:/disk/vmdisk1</rasd:HostResource>
        <rasd:InstanceID>4</rasd:InstanceID>
        <rasd:Parent>3</rasd:Parent>
        <rasd:ResourceType>17</rasd:ResourceType>
      </Item>
      <Item>
        <rasd:AddressOnParent>0</rasd:AddressOnParent>
        <rasd:AutomaticAllocation>true</rasd:AutomaticAllocation>
        <rasd:Connection>{{x .Network}}</rasd:Connection>
        <rasd:Description>VmxNet3 ethernet adapter on "{{x .Network}}"</rasd:Description>
        <rasd:ElementName>Ethernet 1</rasd:ElementName>
        <rasd:InstanceID>5</rasd:InstanceID>
        <rasd:ResourceSubType>VmxNet3</rasd:ResourceSubType>
        <rasd:ResourceType>10</rasd:ResourceType>
      </Item>
      <vmw:Config ovf:required="false" vmw:key="firmware" vmw:value="{{x .Firmware}}"/>
    </VirtualHardwareSection>
  </VirtualSystem>
</Envelope>
`))

func xmlText(s string) (string, error) {
	var b strings.Builder
	err := xml.EscapeText(&b, []byte(s))
	return b.String(), err
}

func ovfDescriptor(v ovfValues) ([]byte, error) {
	var b bytes.Buffer
	if err := ovfTemplate.Execute(&b, v); err != nil {
		return nil, fmt.Errorf("the OVF descriptor: %w", err)
	}
	return b.Bytes(), nil
}
