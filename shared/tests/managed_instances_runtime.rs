//! `Consumer::run` against a Runtime API of its own (a small HTTP server in the test) that says
//! `AWS_LAMBDA_MAX_CONCURRENCY=2`, as Lambda Managed Instances do: two invocations are in flight
//! at once in the one process, each answered under its own request id, each handler seeing its
//! own invocation's trace id.
//!
//! Its own test binary: the runtime reads its settings from the process's environment.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::{RecordContext, message};
use lambda_idempotency::consumer::Consumer;
use lambda_idempotency::runtime;
use lambda_idempotency::store::InMemoryBackend;
use lambda_idempotency::test_util::sqs_event;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Barrier, Notify};

/// An invocation the server hands out on `/next`.
struct Invocation {
    request_id: String,
    trace_id: String,
    body: String,
}

/// What the runtime sent back: (request id, `response` or `error`, body).
type Answer = (String, String, String);

#[derive(Default)]
struct RuntimeApi {
    pending: Mutex<VecDeque<Invocation>>,
    answers: Mutex<Vec<Answer>>,
    answered: Notify,
}

/// One HTTP/1.1 request: its method, path and body.
async fn read_request(
    reader: &mut BufReader<TcpStream>,
) -> std::io::Result<Option<(String, String, Vec<u8>)>> {
    let mut line = String::new();
    if reader.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or_default().to_owned(),
        parts.next().unwrap_or_default().to_owned(),
    );
    let (mut length, mut chunked) = (0, false);
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).await?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':').unwrap_or((header, ""));
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().unwrap_or(0),
            "transfer-encoding" => chunked = value.trim().eq_ignore_ascii_case("chunked"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).await?;
            let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).await?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        body.resize(length, 0);
        reader.read_exact(&mut body).await?;
    }
    Ok(Some((method, path, body)))
}

async fn serve_connection(api: Arc<RuntimeApi>, stream: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    while let Some((method, path, body)) = read_request(&mut reader).await? {
        let reply = if method == "GET" && path.ends_with("/runtime/invocation/next") {
            // A long poll: with nothing left to hand out, held open for good.
            let next = api.pending.lock().unwrap().pop_front();
            let Some(invocation) = next else {
                std::future::pending::<()>().await;
                unreachable!()
            };
            let deadline = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis()
                + 60_000;
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                 lambda-runtime-aws-request-id: {}\r\nlambda-runtime-deadline-ms: {deadline}\r\n\
                 lambda-runtime-invoked-function-arn: arn:aws:lambda:us-east-1:123456789012:function:f\r\n\
                 lambda-runtime-trace-id: {}\r\ncontent-length: {}\r\n\r\n{}",
                invocation.request_id,
                invocation.trace_id,
                invocation.body.len(),
                invocation.body
            )
        } else {
            let mut segments = path.rsplit('/');
            let (kind, request_id) = (
                segments.next().unwrap_or_default(),
                segments.next().unwrap_or_default(),
            );
            api.answers.lock().unwrap().push((
                request_id.to_owned(),
                kind.to_owned(),
                String::from_utf8_lossy(&body).into_owned(),
            ));
            api.answered.notify_one();
            "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n".to_owned()
        };
        reader.get_mut().write_all(reply.as_bytes()).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_run_serves_two_invocations_at_once_when_lambda_says_so() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    // SAFETY: set before the runtime starts, in a test binary of this one test: no other thread
    // reads the environment yet.
    unsafe {
        std::env::set_var("AWS_LAMBDA_RUNTIME_API", address.to_string());
        std::env::set_var("AWS_LAMBDA_MAX_CONCURRENCY", "2");
        std::env::set_var("AWS_LAMBDA_FUNCTION_NAME", "f");
        std::env::set_var("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "2048");
        std::env::set_var("AWS_LAMBDA_FUNCTION_VERSION", "1");
    }
    let api = Arc::new(RuntimeApi::default());
    for (request_id, trace_id, message_id) in [
        (
            "request-a",
            "Root=1-aaaaaaaa-000000000000000000000000;Sampled=1",
            "m-a",
        ),
        (
            "request-b",
            "Root=1-bbbbbbbb-000000000000000000000000;Sampled=1",
            "m-b",
        ),
    ] {
        let event = sqs_event([(message_id, "{}")]).payload;
        api.pending.lock().unwrap().push_back(Invocation {
            request_id: request_id.to_owned(),
            trace_id: trace_id.to_owned(),
            body: serde_json::to_string(&event).unwrap(),
        });
    }
    let server = {
        let api = api.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                tokio::spawn(serve_connection(api.clone(), stream));
            }
        })
    };

    // Each record waits until the other invocation's has started: only two invocations in
    // flight at once get past it.
    let both_in_flight = Arc::new(Barrier::new(2));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let (both_in_flight, seen) = (both_in_flight.clone(), seen.clone());
        message(move |_m: SqsMessage, ctx: RecordContext| {
            let (both_in_flight, seen) = (both_in_flight.clone(), seen.clone());
            async move {
                both_in_flight.wait().await;
                seen.lock()
                    .unwrap()
                    .push((ctx.request_id.clone(), runtime::trace_id()));
                Ok::<_, std::io::Error>(ctx.message_id)
            }
        })
    };
    let consumer = Consumer::builder(InMemoryBackend::default()).idempotent(handler);
    let both_answered = async {
        while api.answers.lock().unwrap().len() < 2 {
            api.answered.notified().await;
        }
    };
    // The runtime's loop, in this task (its future is not `Send`, as in a function's `main`),
    // until both invocations are answered.
    tokio::select! {
        stopped = consumer.run() => panic!("the runtime stopped: {stopped:?}"),
        answered = tokio::time::timeout(Duration::from_secs(20), both_answered) => {
            answered.unwrap_or_else(|_| {
                panic!(
                    "two invocations were never in flight at once: answers {:?}",
                    api.answers.lock().unwrap()
                )
            })
        }
    }
    server.abort();

    let mut answers = api.answers.lock().unwrap().clone();
    answers.sort();
    assert_eq!(
        answers,
        vec![
            (
                "request-a".to_owned(),
                "response".to_owned(),
                r#"{"batchItemFailures":[]}"#.to_owned()
            ),
            (
                "request-b".to_owned(),
                "response".to_owned(),
                r#"{"batchItemFailures":[]}"#.to_owned()
            ),
        ]
    );
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            (
                "request-a".to_owned(),
                Some("Root=1-aaaaaaaa-000000000000000000000000;Sampled=1".to_owned())
            ),
            (
                "request-b".to_owned(),
                Some("Root=1-bbbbbbbb-000000000000000000000000;Sampled=1".to_owned())
            ),
        ]
    );
}
