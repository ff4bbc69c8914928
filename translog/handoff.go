package translog

// NextSeqNo is the sequence number the next appended op will get. After
// Close it is where a successor writer of the same lineage (a relocation
// target, or this writer's own resumption after an aborted handoff)
// continues, together with NextGen.
func (w *Writer) NextSeqNo() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nextSeqNo
}
