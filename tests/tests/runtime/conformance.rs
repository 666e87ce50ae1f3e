//! The saver conformance suite on the in-memory saver, and the adapter
//! suite on the in-memory snapshot adapter (with the saver suite over its
//! `AdapterSaver`).

use weaver::InMemorySaver;
use weaver::checkpoint::MemoryAdapter;

weaver_conformance::saver_suite!(in_memory_saver_conforms, async { InMemorySaver::new() });

weaver_conformance::adapter_suite!(memory_adapter_and_its_adapter_saver_conform, async {
    MemoryAdapter::new()
});
