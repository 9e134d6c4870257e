// Package text holds the small string helpers the selectors packages share: CEL literals and
// accesses (Quote, Attribute, Glob), qualified attribute names (SplitQualified), and message
// text (List, Abbreviate, Closest for "did you mean", Keys, SortedKeys, Uniq).
//
// # Writing CEL
//
//	expr := text.Glob(text.Attribute("gpu.nvidia.com", "productName"), "*A100*")
//	// device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*a100.*$')
package text
