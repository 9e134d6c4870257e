// Package nvmlpci reads a GPU's PCI address from NVML's PciInfo, for the packages that ask NVML
// for it (nvmlgpu's enumeration, nvmltopology's discovery): one reading, so that a GPU's bus ID
// in the inventory and the one its PCIe root is looked up by are the same.
//
//	busID := nvmlpci.BusID(pciInfo) // "0000:07:00.0", or "" when NVML gives no address
package nvmlpci
