package text_test

import (
	"fmt"

	"github.com/gpudra/gpudra/selectors/internal/text"
)

// Example writes a product-name glob as CEL and phrases a "did you mean".
func Example() {
	fmt.Println(text.Glob(text.Attribute("gpu.nvidia.com", "productName"), "*A100*"))
	fmt.Println(text.Closest("prodcutName", []string{"productName", "profile", "uuid"}))
	fmt.Println(text.List([]string{"1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"}, 2))
	// Output:
	// device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*a100.*$')
	// productName
	// 1g.5gb, 2g.10gb and 2 more
}
