#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| sandpipe_proto::fuzz::framer_chunked(sandpipe_proto::frame::Framing::CborSeq, data));
