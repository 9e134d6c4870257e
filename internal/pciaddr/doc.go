// Package pciaddr reads PCI addresses in the spellings NVML and sysfs use, for the packages
// that compare them (gpu's inventory, topology's PCIe roots, nvmltopology's links): one parser,
// so that the same GPU has the same address everywhere.
//
//	id, err := pciaddr.Canonical("00000000:B7:00.0") // "0000:b7:00.0"
package pciaddr
