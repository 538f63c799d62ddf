package delivery_test

import (
	"fmt"

	"github.com/heraldrt/herald/internal/delivery"
)

// A client that stops reading: the data lane fills, the frames that do not fit become one
// marker for their subscription, and the writer sends the marker once the frames before the gap
// are out.
func Example() {
	lanes, err := delivery.New(delivery.Config{
		MaxDataFrames: 2,
		EncodeMarker: func(dst []byte, m delivery.Marker) []byte {
			return fmt.Appendf(dst, `{"type":"gap","sub":%q,"reason":%q,"from":%q,"to":%q,"lost":%d}`,
				m.Key, m.Reason, m.First, m.Last, m.Lost)
		},
	})
	if err != nil {
		panic(err)
	}
	defer lanes.Close()

	body := []byte(`"row":{"id":1}}`) // encoded once, shared by every subscriber
	for i := range 5 {
		pos := fmt.Sprintf("0/%X", 0x100+i)
		admitted := lanes.PushData(delivery.Frame{Head: []byte(`{"sub":"s1",`), Body: body, Key: "s1", Pos: pos})
		fmt.Println("push", pos, admitted)
	}

	// The writer's non-blocking drain; a real one would then flush and wait in Next.
	var batch delivery.Batch
	for lanes.TryNext(&batch) {
		for _, it := range batch.Items {
			fmt.Printf("write %s: %s%s\n", it.Kind, it.Head, it.Body)
		}
	}
	// Output:
	// push 0/100 true
	// push 0/101 true
	// push 0/102 false
	// push 0/103 false
	// push 0/104 false
	// write data: {"sub":"s1","row":{"id":1}}
	// write data: {"sub":"s1","row":{"id":1}}
	// write marker: {"type":"gap","sub":"s1","reason":"lane_full","from":"0/102","to":"0/104","lost":3}
}
