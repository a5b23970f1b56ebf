#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| sandpipe_proto::mcp::fuzz_http(data));
