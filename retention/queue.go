package retention

import (
	"container/heap"
	"time"
)

// dueQueue orders channels by when their next round is due; a channel is
// in it at most once, at its earliest due time. Owned by the scheduler.
type dueQueue struct {
	items dueHeap
	at    map[string]int // index in items, by channel
}

func newDueQueue() *dueQueue { return &dueQueue{items: dueHeap{}, at: map[string]int{}} }

// push makes channel due at t, unless it is due earlier already.
func (q *dueQueue) push(channel string, t time.Time) {
	if i, ok := q.at[channel]; ok {
		if t.Before(q.items.e[i].due) {
			q.items.e[i].due = t
			heap.Fix(q, i)
		}
		return
	}
	heap.Push(q, dueItem{channel: channel, due: t})
}

// peek returns the channel due first.
func (q *dueQueue) peek() (string, time.Time, bool) {
	if len(q.items.e) == 0 {
		return "", time.Time{}, false
	}
	return q.items.e[0].channel, q.items.e[0].due, true
}

// pop removes the channel due first.
func (q *dueQueue) pop() { heap.Pop(q) }

type dueItem struct {
	channel string
	due     time.Time
}

type dueHeap struct{ e []dueItem }

// heap.Interface, on the queue so that it keeps its index current.
func (q *dueQueue) Len() int           { return len(q.items.e) }
func (q *dueQueue) Less(i, j int) bool { return q.items.e[i].due.Before(q.items.e[j].due) }
func (q *dueQueue) Swap(i, j int) {
	e := q.items.e
	e[i], e[j] = e[j], e[i]
	q.at[e[i].channel], q.at[e[j].channel] = i, j
}
func (q *dueQueue) Push(x any) {
	it := x.(dueItem)
	q.at[it.channel] = len(q.items.e)
	q.items.e = append(q.items.e, it)
}
func (q *dueQueue) Pop() any {
	e := q.items.e
	it := e[len(e)-1]
	q.items.e = e[:len(e)-1]
	delete(q.at, it.channel)
	return it
}
