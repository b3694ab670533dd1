//! Request heads parsed as hyper does (httparse) and then checked by `proxy::downstream::guard` never panic,
//! and no head with both Content-Length and Transfer-Encoding passes. The route-matching path
//! forms (`routing::path::normalize` and `node_reading`) never panic and always start with `/`.
#![no_main]
use internal::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    if let Ok(text) = std::str::from_utf8(data) {
        let path = text.split(['?', ' ']).next().unwrap_or("");
        assert!(internal::routing::path::normalize(path).starts_with('/'));
        if let Some(alt) = internal::routing::path::node_reading(path) {
            assert!(alt.starts_with('/') && !alt.contains("//"), "{alt:?}");
        }
    }
    let Ok(httparse::Status::Complete(_)) = req.parse(data) else { return };
    let mut b = http::Request::builder().method(req.method.unwrap_or("GET")).uri(req.path.unwrap_or("/"));
    for h in req.headers.iter() {
        b = b.header(h.name, h.value);
    }
    let Ok(request) = b.body(()) else { return };
    let limits = Config::go_defaults().limits;
    let both = request.headers().contains_key("content-length") && request.headers().contains_key("transfer-encoding");
    let verdict = internal::proxy::downstream::guard::check_head(&request, &limits);
    assert!(!(both && verdict.is_ok()), "CL+TE passed the guard");
});
