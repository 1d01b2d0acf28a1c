// The stomp-bridge demo page: connect through the bridge's WebSocket endpoint,
// subscribe to a topic, show what arrives, send what is typed.
// Query parameters preset the form: ?url=ws://host:15674/ws&destination=/topic/x&connect=1
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  const host = location.hostname || "localhost";
  $("url").value = params.get("url") || `ws://${host}:15674/ws`;
  for (const name of ["login", "passcode", "vhost", "destination"]) {
    if (params.has(name)) $(name).value = params.get(name);
  }

  let client = null;
  let destination = null;

  function status(text, kind) {
    $("status").textContent = text;
    $("status").className = kind;
  }

  function connected(on) {
    $("connect").disabled = on;
    $("disconnect").disabled = !on;
    $("body").disabled = !on;
    $("send").disabled = !on;
  }

  function show(message) {
    const item = document.createElement("li");
    const where = document.createElement("span");
    where.className = "destination";
    where.textContent = message.headers.destination;
    const body = document.createElement("span");
    body.className = "body";
    body.textContent = message.body;
    item.append(where, body);
    $("messages").append(item);
    $("count").textContent = String($("messages").children.length);
  }

  function connect() {
    destination = $("destination").value;
    client = new StompJs.Client({
      brokerURL: $("url").value,
      connectHeaders: { login: $("login").value, passcode: $("passcode").value, host: $("vhost").value },
      heartbeatIncoming: 10000,
      heartbeatOutgoing: 10000,
      reconnectDelay: 0,
      onConnect(frame) {
        const server = frame.headers.server || "a STOMP server";
        // The RECEIPT comes once the subscription is in place (for a /topic/, its queue bound):
        // messages sent after it reach this page; before it, a topic message may go nowhere.
        const receipt = `subscribed-${Date.now()}`;
        client.watchForReceipt(receipt, () => {
          status(`Connected to ${server}, subscribed to ${destination}.`, "connected");
          connected(true);
        });
        status(`Connected to ${server}, subscribing to ${destination} …`, "idle");
        client.subscribe(destination, show, { receipt });
      },
      onStompError(frame) {
        status(`ERROR ${frame.headers.message}: ${frame.body}`, "error");
      },
      onWebSocketClose(event) {
        connected(false);
        if ($("status").className !== "error") {
          status(`Disconnected (WebSocket close ${event.code}${event.reason ? " " + event.reason : ""}).`, "idle");
        }
      },
      onWebSocketError() {
        // Browsers hide why a handshake failed; the console shows the HTTP status.
        status(`Cannot reach ${$("url").value}: is the bridge running there with its WebSocket ` +
          "listener, and does its ws_allowed_origins include this page's origin?", "error");
      },
    });
    status(`Connecting to ${$("url").value} …`, "idle");
    client.activate();
  }

  $("connection").addEventListener("submit", (event) => {
    event.preventDefault();
    connect();
  });
  $("disconnect").addEventListener("click", () => client && client.deactivate());
  $("sender").addEventListener("submit", (event) => {
    event.preventDefault();
    const body = $("body").value;
    if (!client || !client.connected || body === "") return;
    client.publish({ destination, body });
    $("body").value = "";
  });

  if (params.get("connect") === "1") connect();
})();
